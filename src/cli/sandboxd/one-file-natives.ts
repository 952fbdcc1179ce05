import { lstatSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import sea from "node:sea";
import { processExists } from "../../shared/process-exists.js";

/** A native file to unpack: its name, bytes and mode, and the variable that points the daemon at it. */
export interface NativeFile {
  name: string;
  bytes: Uint8Array;
  mode: number;
  variable: string;
}

/**
 * The native files the one-file daemon carries as assets (see scripts/build-one-file.mjs): the
 * sandboxd-exec helper and the Node-API addon. A process can neither exec nor dlopen a file inside
 * its own executable, so they are written at start by {@link unpackInto} under `SANDBOXD_UNPACK_DIR`
 * or the temporary directory. That directory must allow exec (not a noexec mount) and be safe from
 * other users; otherwise the daemon says why on stderr and exits 1.
 */
export function unpackNativeFiles(): void {
  if (!sea.isSea()) return;
  const asset = (name: string) => new Uint8Array(sea.getAsset(name));
  try {
    unpackInto(process.env.SANDBOXD_UNPACK_DIR || tmpdir(), [
      { name: "sandboxd-exec", bytes: asset("sandboxd-exec"), mode: 0o700, variable: "SANDBOXD_EXEC_HELPER" },
      { name: "sandboxd.node", bytes: asset("sandboxd.node"), mode: 0o600, variable: "SANDBOXD_NATIVE_ADDON" },
    ]);
  } catch (error) {
    process.stderr.write(`sandboxd: ${(error as Error).message}\n`);
    process.exit(1);
  }
}

/**
 * Writes `files` into a new directory of mode 0700 (mkdtemp: a name no other user can guess or
 * pre-create) under `root`, points their variables at them, and removes the directory at exit; the
 * directories of daemons of this user that died without their exit (SIGKILL) are removed first.
 * The daemon runs these files, as root where it is root, for as long as it lives: `root` is first
 * checked with {@link checkUnpackRoot}, since whoever may rename entries in it, or in a directory
 * above it, could swap the new directory for one of their own. Returns the new directory; throws
 * an Error, having written nothing, when `root` is not safe.
 */
export function unpackInto(root: string, files: readonly NativeFile[]): string {
  const real = checkUnpackRoot(root);
  removeStaleUnpacked(real);
  const directory = mkdtempSync(path.join(real, `sandboxd-${process.pid}-`));
  process.once("exit", () => rmSync(directory, { recursive: true, force: true }));
  for (const { name, bytes, mode, variable } of files) {
    const file = path.join(directory, name);
    // flag wx: created here, never through a file that appeared meanwhile.
    writeFileSync(file, bytes, { mode, flag: "wx" });
    process.env[variable] = file;
  }
  return directory;
}

/**
 * Checks that no other user can swap what the daemon unpacks under `root`, as the state directory
 * is checked: `root` resolved (symlinks followed once, here) and every directory above it must belong
 * to root or to the daemon's user, and be writable by group or others only with the sticky bit, which
 * keeps them from renaming entries they do not own (as /tmp has it). Returns the resolved path, which
 * is the one to use from then on; throws an Error naming the directory and the fix.
 */
export function checkUnpackRoot(root: string): string {
  const what = `unpack directory ${root} (SANDBOXD_UNPACK_DIR)`;
  let real: string;
  try {
    real = realpathSync(root);
  } catch (error) {
    throw new Error(`${what}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { cause: error });
  }
  const uid = process.getuid?.();
  for (let directory = real; ; directory = path.dirname(directory)) {
    const stat = lstatSync(directory);
    if (!stat.isDirectory()) throw new Error(`${what}: ${directory} is not a directory`);
    if (uid !== undefined && stat.uid !== 0 && stat.uid !== uid) {
      throw new Error(
        `${what}: ${directory} belongs to uid ${stat.uid}, who could swap the native files the daemon runs: use a directory of root or of uid ${uid}`,
      );
    }
    if ((stat.mode & 0o022) !== 0 && (stat.mode & 0o1000) === 0) {
      const mode = (stat.mode & 0o7777).toString(8).padStart(4, "0");
      throw new Error(
        `${what}: ${directory} has mode ${mode}: other users could swap the native files the daemon runs (chmod go-w ${directory}, or set the sticky bit as /tmp has)`,
      );
    }
    if (directory === path.dirname(directory)) return real;
  }
}

/**
 * Removes `sandboxd-<pid>-XXXXXX` directories under `root` that belong to this user (real directories,
 * not symlinks) and whose daemon is no longer running.
 */
function removeStaleUnpacked(root: string): void {
  let entries: string[];
  try {
    entries = readdirSync(root);
  } catch {
    return;
  }
  for (const entry of entries) {
    const owner = /^sandboxd-(\d+)-[A-Za-z0-9]{6}$/.exec(entry);
    if (owner === null || Number(owner[1]) === process.pid || processExists(Number(owner[1]))) continue;
    const directory = path.join(root, entry);
    try {
      const stat = lstatSync(directory);
      if (stat.isDirectory() && stat.uid === process.getuid?.()) rmSync(directory, { recursive: true, force: true });
    } catch {
      // Gone meanwhile, or not ours to look at.
    }
  }
}

unpackNativeFiles();
