import {
  close as closeFd,
  constants as fsConstants,
  fstat,
  open as openFile,
  type BigIntStats,
  type Dirent,
} from "node:fs";
import fs from "node:fs/promises";
import { loadNativeAddon, type UserIdentity } from "../process/index.js";
import { FileError } from "./errors.js";

/** `O_PATH` (Linux): an fd that names a file without opening it for reading or writing. */
export const O_PATH = 0o10000000;
/** openat2's `RESOLVE_NO_XDEV`: refuse to cross a mount point. */
export const RESOLVE_NO_XDEV = 0x01;
/** openat2's `RESOLVE_NO_MAGICLINKS`: refuse /proc's magic links (`/proc/self/fd/N`, `/proc/self/root`). */
export const RESOLVE_NO_MAGICLINKS = 0x02;
/** openat2's `RESOLVE_BENEATH`: refuse to resolve outside the starting directory (`..`, absolute symlinks). */
export const RESOLVE_BENEATH = 0x08;
/** `d_type` of a directory in a directory listing. */
export const DT_DIR = 4;
/** `d_type` of a symlink in a directory listing. */
export const DT_LNK = 10;
/** `d_type` when the filesystem does not say (then stat tells). */
export const DT_UNKNOWN = 0;

/** What the kernel says of a file: lstat(2)'s fields that the file service uses. */
export interface RawStat {
  /** st_mode: type and permission bits. */
  mode: number;
  /** Size in bytes. */
  size: number;
  /** Owner's uid. */
  uid: number;
  /** Owner's gid. */
  gid: number;
  /** Device of the filesystem. */
  dev: number;
  /** Inode number. */
  ino: number;
  /** Last content modification: seconds since the epoch. */
  mtimeSeconds: number;
  /** Last content modification: nanoseconds within the second. */
  mtimeNanos: number;
  /** A symlink's target, from {@link FileCalls.statEntries}. */
  link?: string;
}

/** The names and `d_type`s of a directory's entries (without `.` and `..`), in the kernel's order. */
export interface DirectoryEntries {
  /** Entry names. */
  names: string[];
  /** `d_type` of each name, {@link DT_UNKNOWN} when the filesystem does not say. */
  types: Uint8Array;
}

/** The supplementary groups and ids a file call runs with: the `--user` user's. */
export interface FileIdentity {
  /** User id. */
  uid: number;
  /** Primary group id. */
  gid: number;
  /** Supplementary groups (initgroups), the primary one included. */
  groups: readonly number[];
}

/**
 * FileCalls are the system calls the file domain is built on, on directory fds (the `*at` family), so
 * every name is looked up in a directory already pinned: a path swapped under a call cannot redirect
 * it. Errors are Node-style errors with an errno `code`.
 *
 * Two implementations: the native addon's (`native/files.c`), which runs each call with the `--user`
 * user's file-system identity and has openat2, and one on Node's `fs` through `/proc/self/fd/<fd>/<name>`
 * paths, for a daemon without the addon (its own identity only; no openat2, so every path is walked
 * one component at a time; no renameat2, so "fail if exists" is checked just before the rename).
 */
export interface FileCalls {
  /** Whether these calls run with an identity of their own (the addon with `--user`). */
  readonly switchesIdentity: boolean;
  /** Whether openat2 is there to try (the addon; the kernel may still lack it: ENOSYS). */
  readonly hasOpenBeneath: boolean;
  /** Whether inotify watches can be made (the addon). */
  readonly canWatch: boolean;
  /** openat(dir, name, flags, mode), close-on-exec. `name` is one component. */
  openAt(dir: number, name: string, flags: number, mode?: number): Promise<number>;
  /** openat2(dir, path, { flags, mode, resolve }): rejects with ENOSYS where the kernel or these calls lack it. */
  openBeneath(dir: number, path: string, flags: number, resolve: number): Promise<number>;
  /** Opens for real what an O_PATH fd names, with `flags` (permission checks as for an open). */
  reopen(fd: number, flags: number): Promise<number>;
  /** lstat of `name` in `dir`, or fstat of `dir` itself when `name` is empty. */
  stat(dir: number, name: string): Promise<RawStat>;
  /** The target of the symlink `name` in `dir`. */
  readlink(dir: number, name: string): Promise<string>;
  /** mkdirat; the mode is then subject to the umask (chmod after for an exact one). */
  mkdir(dir: number, name: string, mode: number): Promise<void>;
  /** unlinkat, of a directory (rmdir) when `directory`. */
  unlink(dir: number, name: string, directory: boolean): Promise<void>;
  /** renameat2: EEXIST when `noReplace` and the destination exists. */
  rename(fromDir: number, fromName: string, toDir: number, toName: string, noReplace: boolean): Promise<void>;
  /** Sets the permission bits of what `fd` (an O_PATH fd will do) names. */
  chmod(fd: number, mode: number): Promise<void>;
  /** The entries of directory `fd`. */
  readdir(fd: number): Promise<DirectoryEntries>;
  /** lstat of each name in `dir` (null for one gone meanwhile), with symlink targets. */
  statEntries(dir: number, names: readonly string[]): Promise<(RawStat | null)[]>;
  /** Reserves `length` bytes for file `fd` (fallocate): ENOSPC now rather than halfway. A no-op where not supported. */
  allocate(fd: number, length: number): Promise<void>;
  /** inotify_add_watch on what the O_PATH fd `target` names; returns the watch descriptor. */
  addWatch(inotifyFd: number, target: number, mask: number): Promise<number>;
  /** Closes an fd (never throws). */
  close(fd: number): Promise<void>;
}

/** The file functions of `native/files.c` (see there for each op). */
interface NativeFileFunctions {
  fileCall(
    op: number,
    identity: Int32Array | null,
    fd: number,
    path: string,
    flags: number,
    mode: number,
    fd2: number,
    path2: string,
  ): Promise<unknown>;
  userGroups(name: string, gid: number): number[];
  watchStart(onBytes: (bytes: Buffer) => void): { fd: number; handle: object };
  watchStop(handle: object): void;
}

/** The ops of `fileCall`, as `native/files.c` numbers them. */
const op = {
  openAt: 1,
  openBeneath: 2,
  reopen: 3,
  stat: 4,
  readlink: 5,
  mkdir: 6,
  unlink: 7,
  rename: 8,
  chmod: 9,
  readdir: 10,
  statEntries: 11,
  allocate: 12,
  addWatch: 13,
} as const;

const AT_REMOVEDIR = 0x200;
const RENAME_NOREPLACE = 1;

/** The addon's file functions, or undefined when the addon is missing or older than them. */
export function nativeFileFunctions(): NativeFileFunctions | undefined {
  const addon = loadNativeAddon() as (Partial<NativeFileFunctions> & object) | null;
  if (addon === null || typeof addon.fileCall !== "function" || typeof addon.watchStart !== "function")
    return undefined;
  return addon as NativeFileFunctions;
}

/** Options for {@link createFileCalls}. */
export interface FileCallsOptions {
  /** The user whose rights every call runs with; the daemon's own when undefined (or the same). */
  user?: UserIdentity;
  /** Use the calls on Node's `fs` even when the addon is there (tests of the fallback). */
  withoutAddon?: boolean;
}

/**
 * Creates the {@link FileCalls} of this daemon: the addon's when it is there, else Node's. When
 * `user` is another user and the addon is missing, every call fails with FILE_SERVICE_UNAVAILABLE:
 * the file service would otherwise act with the daemon's rights on that user's behalf.
 */
export function createFileCalls(options: FileCallsOptions = {}): FileCalls {
  const native = options.withoutAddon ? undefined : nativeFileFunctions();
  const user = options.user;
  const otherUser = user !== undefined && (user.uid !== process.getuid?.() || user.gid !== process.getgid?.());
  if (native === undefined) {
    if (otherUser)
      return unavailableFileCalls(
        `file operations as ${user.name} need sandboxd's native addon, which is not built or not loaded`,
      );
    return nodeFileCalls;
  }
  const identity = otherUser ? Int32Array.from([user.uid, user.gid, ...native.userGroups(user.name, user.gid)]) : null;
  return createNativeFileCalls(native, identity);
}

function createNativeFileCalls(native: NativeFileFunctions, identity: Int32Array | null): FileCalls {
  const call = (which: number, fd: number, path: string, flags = 0, mode = 0, fd2 = -1, path2 = "") =>
    native.fileCall(which, identity, fd, path, flags, mode, fd2, path2);
  return {
    switchesIdentity: identity !== null,
    hasOpenBeneath: true,
    canWatch: true,
    openAt: (dir, name, flags, mode = 0) => call(op.openAt, dir, name, flags, mode) as Promise<number>,
    openBeneath: (dir, path, flags, resolve) => call(op.openBeneath, dir, path, flags, 0, resolve) as Promise<number>,
    reopen: (fd, flags) => call(op.reopen, fd, "", flags) as Promise<number>,
    stat: (dir, name) => call(op.stat, dir, name) as Promise<RawStat>,
    readlink: (dir, name) => call(op.readlink, dir, name) as Promise<string>,
    mkdir: async (dir, name, mode) => void (await call(op.mkdir, dir, name, 0, mode)),
    unlink: async (dir, name, directory) => void (await call(op.unlink, dir, name, directory ? AT_REMOVEDIR : 0)),
    rename: async (fromDir, fromName, toDir, toName, noReplace) =>
      void (await call(op.rename, fromDir, fromName, noReplace ? RENAME_NOREPLACE : 0, 0, toDir, toName)),
    chmod: async (fd, mode) => void (await call(op.chmod, fd, "", 0, mode)),
    // Names travel NUL-separated both ways (a name never holds a NUL), stats packed: one value for
    // a whole directory rather than one per entry.
    readdir: async (fd) => {
      const { names, types } = (await call(op.readdir, fd, "")) as { names: string; types: Uint8Array };
      return { names: types.length === 0 ? [] : names.split("\0"), types };
    },
    statEntries: async (dir, names) => {
      if (names.length === 0) return [];
      const { stats, links } = (await call(op.statEntries, dir, "", 0, 0, -1, names.join("\0"))) as {
        stats: Float64Array;
        links: (string | undefined)[];
      };
      return names.map((_, index) => {
        const at = index * 8;
        if (stats[at] === -1) return null;
        const raw: RawStat = {
          mode: stats[at],
          size: stats[at + 1],
          uid: stats[at + 2],
          gid: stats[at + 3],
          dev: stats[at + 4],
          ino: stats[at + 5],
          mtimeSeconds: stats[at + 6],
          mtimeNanos: stats[at + 7],
        };
        const link = links[index];
        if (link !== undefined) raw.link = link;
        return raw;
      });
    },
    allocate: async (fd, length) => {
      try {
        await call(op.allocate, fd, "", 0, length);
      } catch (error) {
        // A filesystem that cannot reserve space (EOPNOTSUPP) still takes the write.
        if ((error as NodeJS.ErrnoException).code !== "EOPNOTSUPP") throw error;
      }
    },
    addWatch: (inotifyFd, target, mask) => call(op.addWatch, inotifyFd, "", mask, 0, target) as Promise<number>,
    close: closeQuietly,
  };
}

function closeQuietly(fd: number): Promise<void> {
  return new Promise<void>((resolve) => (fd < 0 ? resolve() : closeFd(fd, () => resolve())));
}

/** `/proc/self/fd/<dir>/<name>`: the name looked up in the directory that fd pins. */
const at = (dir: number, name: string) => (name === "" ? `/proc/self/fd/${dir}` : `/proc/self/fd/${dir}/${name}`);

function rawStat(stats: BigIntStats): RawStat {
  return {
    mode: Number(stats.mode),
    size: Number(stats.size),
    uid: Number(stats.uid),
    gid: Number(stats.gid),
    dev: Number(stats.dev),
    ino: Number(stats.ino),
    mtimeSeconds: Number(stats.mtimeNs / 1_000_000_000n),
    mtimeNanos: Number(stats.mtimeNs % 1_000_000_000n),
  };
}

function direntType(entry: Dirent): number {
  if (entry.isDirectory()) return DT_DIR;
  if (entry.isSymbolicLink()) return DT_LNK;
  if (entry.isFile()) return 8;
  return DT_UNKNOWN;
}

const openFd = (path: string, flags: number, mode?: number) =>
  new Promise<number>((resolve, reject) =>
    openFile(path, flags, mode ?? 0o666, (error, fd) => (error ? reject(error) : resolve(fd))),
  );

const fstatBig = (fd: number) =>
  new Promise<BigIntStats>((resolve, reject) =>
    fstat(fd, { bigint: true }, (error, stats) => (error ? reject(error) : resolve(stats))),
  );

/** The calls on Node's `fs` (see {@link FileCalls}). */
const nodeFileCalls: FileCalls = {
  switchesIdentity: false,
  hasOpenBeneath: false,
  canWatch: false,
  openAt: (dir, name, flags, mode) => openFd(at(dir, name), flags, mode),
  openBeneath: () => Promise.reject(Object.assign(new Error("openat2 needs the native addon"), { code: "ENOSYS" })),
  reopen: (fd, flags) => openFd(at(fd, ""), flags),
  // "" is the fd itself: an lstat of /proc/self/fd/<fd> would describe the magic link.
  stat: async (dir, name) =>
    rawStat(name === "" ? await fstatBig(dir) : await fs.lstat(at(dir, name), { bigint: true })),
  readlink: (dir, name) => fs.readlink(at(dir, name)),
  mkdir: (dir, name, mode) => fs.mkdir(at(dir, name), { mode }),
  unlink: (dir, name, directory) => (directory ? fs.rmdir(at(dir, name)) : fs.unlink(at(dir, name))),
  rename: async (fromDir, fromName, toDir, toName, noReplace) => {
    if (noReplace) {
      const existing = await fs.lstat(at(toDir, toName)).catch(() => undefined);
      if (existing !== undefined) throw Object.assign(new Error(`file already exists: ${toName}`), { code: "EEXIST" });
    }
    await fs.rename(at(fromDir, fromName), at(toDir, toName));
  },
  chmod: (fd, mode) => fs.chmod(at(fd, ""), mode),
  readdir: async (fd) => {
    const entries = await fs.readdir(at(fd, ""), { withFileTypes: true });
    return { names: entries.map((entry) => entry.name), types: Uint8Array.from(entries.map(direntType)) };
  },
  statEntries: (dir, names) =>
    Promise.all(
      names.map(async (name) => {
        try {
          const stats = rawStat(await fs.lstat(at(dir, name), { bigint: true }));
          if ((stats.mode & fsConstants.S_IFMT) === fsConstants.S_IFLNK)
            stats.link = await fs.readlink(at(dir, name)).catch(() => undefined);
          return stats;
        } catch {
          return null;
        }
      }),
    ),
  allocate: async () => {},
  addWatch: () => Promise.reject(Object.assign(new Error("inotify needs the native addon"), { code: "ENOSYS" })),
  close: closeQuietly,
};

/** Calls that all fail with FILE_SERVICE_UNAVAILABLE and `why`. */
function unavailableFileCalls(why: string): FileCalls {
  const fail = () => Promise.reject(new FileError(why, "FILE_SERVICE_UNAVAILABLE"));
  return {
    switchesIdentity: false,
    hasOpenBeneath: false,
    canWatch: false,
    openAt: fail,
    openBeneath: fail,
    reopen: fail,
    stat: fail,
    readlink: fail,
    mkdir: fail,
    unlink: fail,
    rename: fail,
    chmod: fail,
    readdir: fail,
    statEntries: fail,
    allocate: fail,
    addWatch: fail,
    close: closeQuietly,
  };
}
