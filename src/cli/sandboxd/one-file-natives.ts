import { lstatSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import sea from "node:sea";
import { processExists } from "../../shared/process-exists.js";

/**
 * The native files the one-file daemon carries as assets (see scripts/build-one-file.mjs): the
 * sandboxd-exec helper and the Node-API addon. A process can neither exec nor dlopen a file inside
 * its own executable, so they are written, at start, into a new directory of mode 0700 (mkdtemp:
 * a name no other user can guess or pre-create) under `SANDBOXD_UNPACK_DIR` or the temporary
 * directory, pointed at by the variables the daemon looks them up in, and removed at exit; the
 * directories of daemons of this user that died without their exit (SIGKILL) are removed at the next
 * start. That directory must allow exec (not a noexec mount).
 */
export function unpackNativeFiles(): void {
  if (!sea.isSea()) return;
  const root = process.env.SANDBOXD_UNPACK_DIR || tmpdir();
  removeStaleUnpacked(root);
  const directory = mkdtempSync(path.join(root, `sandboxd-${process.pid}-`));
  process.once("exit", () => rmSync(directory, { recursive: true, force: true }));
  const unpack = (name: string, variable: string, mode: number) => {
    const file = path.join(directory, name);
    // flag wx: created here, never through a file that appeared meanwhile.
    writeFileSync(file, new Uint8Array(sea.getAsset(name)), { mode, flag: "wx" });
    process.env[variable] = file;
  };
  unpack("sandboxd-exec", "SANDBOXD_EXEC_HELPER", 0o700);
  unpack("sandboxd.node", "SANDBOXD_NATIVE_ADDON", 0o600);
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
