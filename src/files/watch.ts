import { constants as fsConstants } from "node:fs";
import { errnoOf, FileError, fileErrorOf } from "./errors.js";
import { fileStatOf, type FileStat } from "./file-stat.js";
import { DT_DIR, DT_UNKNOWN, nativeFileFunctions, O_PATH } from "./native-calls.js";
import type { Location } from "./resolve.js";
import type { FilesContext } from "./context.js";
import { isTemporaryName } from "./temporaries.js";

/** Default events one watch holds for a client that reads slowly before it drops them. */
export const defaultMaxQueuedWatchEvents = 4096;
/** Default directories one recursive watch watches at most. */
export const defaultMaxWatchedDirectories = 8192;

const IN_MODIFY = 0x2;
const IN_ATTRIB = 0x4;
const IN_MOVED_FROM = 0x40;
const IN_MOVED_TO = 0x80;
const IN_CREATE = 0x100;
const IN_DELETE = 0x200;
const IN_DELETE_SELF = 0x400;
const IN_MOVE_SELF = 0x800;
const IN_UNMOUNT = 0x2000;
const IN_Q_OVERFLOW = 0x4000;
const IN_IGNORED = 0x8000;
const IN_ONLYDIR = 0x1000000;
const IN_EXCL_UNLINK = 0x4000000;
const IN_ISDIR = 0x40000000;
const watchMask =
  IN_MODIFY |
  IN_ATTRIB |
  IN_MOVED_FROM |
  IN_MOVED_TO |
  IN_CREATE |
  IN_DELETE |
  IN_DELETE_SELF |
  IN_MOVE_SELF |
  IN_ONLYDIR |
  IN_EXCL_UNLINK;

/** What happened to an entry. */
export type FileChangeKind = "create" | "write" | "remove" | "rename" | "attribute";

/** One event of a watch. */
export type WatchEvent =
  | { kind: "started"; stat: FileStat; watchedDirectories: number }
  | { kind: "change"; change: FileChangeKind; path: string; oldPath: string; isDirectory: boolean }
  | { kind: "overflow"; source: "kernel" | "client" | "watch-limit"; lostEvents: number; path: string }
  | { kind: "ended"; reason: "directory-removed" | "directory-moved" | "unmounted" };

/** Options of a watch. */
export interface WatchOptions {
  /** Watch subdirectories too, those created later included. */
  recursive?: boolean;
  /** Events held for a slow client before they are dropped. Default {@link defaultMaxQueuedWatchEvents}. */
  maxQueuedEvents?: number;
  /** Directories watched at most. Default {@link defaultMaxWatchedDirectories}. */
  maxWatchedDirectories?: number;
}

/**
 * FileWatch is a directory watched through inotify (the addon's reader thread). Its events start with
 * `started`, once every kernel watch of the initial tree is in place, and end with `ended` when the
 * watched directory goes away; `overflow` says events were lost (the kernel's queue, a client too
 * slow for this watch's queue, or a new subdirectory past the kernel's or the watch's limit). A
 * subdirectory created under a recursive watch is watched at once and scanned, so what was created
 * in it before its watch is reported too. The temporary files of writes (`.sandboxd-*.part`) never
 * appear: a write put in place is one `create` of its path when it made the file, one `write` when
 * it replaced one.
 */
export interface FileWatch {
  /** The events, until `signal` aborts or the watch ends; the watch is closed when they stop. */
  events(signal?: AbortSignal): AsyncGenerator<WatchEvent>;
  /** Stops watching. Idempotent. */
  close(): Promise<void>;
}

/** Starts a watch of `requested`; every refusal comes from here, before the first event. */
export async function openWatch(context: FilesContext, requested: string, options: WatchOptions): Promise<FileWatch> {
  const { resolver, calls, names } = context;
  const location = resolver.locate(requested);
  const top = await resolver.open(location, O_PATH | fsConstants.O_DIRECTORY, true);
  const native = nativeFileFunctions();
  if (native === undefined || !calls.canWatch) {
    await calls.close(top);
    throw new FileError(
      "watching needs sandboxd's native addon, which is not built or not loaded",
      "FILE_SERVICE_UNAVAILABLE",
      { metadata: { path: requested } },
    );
  }
  let stat: FileStat;
  try {
    stat = fileStatOf(location.display, await calls.stat(top, ""), names);
  } catch (error) {
    await calls.close(top);
    throw fileErrorOf(error, requested);
  }
  const watch = new InotifyWatch(context, location, options, native);
  try {
    await watch.start(top);
  } catch (error) {
    await watch.close();
    throw error;
  } finally {
    await calls.close(top);
  }
  return {
    events: (signal) => watch.events(stat, signal),
    close: () => watch.close(),
  };
}

type NativeFunctions = NonNullable<ReturnType<typeof nativeFileFunctions>>;

class InotifyWatch {
  private readonly directories = new Map<number, string>();
  /** Moves of write temporaries seen (by cookie) whose other half may come in a later read. */
  private readonly temporaryMoves = new Map<number, string>();
  private readonly queue: WatchEvent[] = [];
  private lost = 0;
  private wake: (() => void) | undefined;
  private instance: { fd: number; handle: object } | undefined;
  private state: "open" | "ended" | "closed" = "open";
  private adding: Promise<unknown> = Promise.resolve();
  private readonly maxQueued: number;
  private readonly maxDirectories: number;
  private topWatch = -1;

  constructor(
    private readonly context: FilesContext,
    private readonly location: Location,
    private readonly options: WatchOptions,
    private readonly native: NativeFunctions,
  ) {
    this.maxQueued = options.maxQueuedEvents ?? defaultMaxQueuedWatchEvents;
    this.maxDirectories = options.maxWatchedDirectories ?? defaultMaxWatchedDirectories;
  }

  /** Creates the instance, watches `top` (and, recursively, the tree under it). */
  async start(top: number): Promise<void> {
    try {
      this.instance = this.native.watchStart((bytes) => this.receive(bytes));
    } catch (error) {
      if (errnoOf(error) === "EMFILE") throw watchLimit("fs.inotify.max_user_instances", error);
      throw fileErrorOf(error, this.location.requested);
    }
    try {
      this.topWatch = await this.context.calls.addWatch(this.instance.fd, top, watchMask);
    } catch (error) {
      if (errnoOf(error) === "ENOSPC") throw watchLimit("fs.inotify.max_user_watches", error);
      throw fileErrorOf(error, this.location.requested);
    }
    this.directories.set(this.topWatch, this.location.display);
    if (this.options.recursive) await this.watchTree(top, this.location.display, false);
    await this.adding;
  }

  get watchedDirectories(): number {
    return this.directories.size;
  }

  async *events(stat: FileStat, signal?: AbortSignal): AsyncGenerator<WatchEvent> {
    try {
      yield { kind: "started", stat, watchedDirectories: this.directories.size };
      for (;;) {
        if (signal?.aborted || this.state === "closed") return;
        const next = this.queue.shift();
        if (next !== undefined) {
          yield next;
          if (next.kind === "ended") return;
          continue;
        }
        if (this.lost > 0) {
          yield { kind: "overflow", source: "client", lostEvents: this.lost, path: "" };
          this.lost = 0;
          continue;
        }
        await new Promise<void>((resolve) => {
          const done = () => {
            signal?.removeEventListener("abort", done);
            this.wake = undefined;
            resolve();
          };
          this.wake = done;
          signal?.addEventListener("abort", done, { once: true });
          if (signal?.aborted) done();
        });
      }
    } finally {
      await this.close();
    }
  }

  async close(): Promise<void> {
    if (this.state === "closed") return;
    this.state = "closed";
    // Watches being added use the instance's fd: it is closed by the reader thread once stopped.
    await this.adding.catch(() => {});
    if (this.instance !== undefined) this.native.watchStop(this.instance.handle);
    this.wake?.();
  }

  private push(event: WatchEvent): void {
    if (this.state !== "open") return;
    if (this.lost > 0 || this.queue.length >= this.maxQueued) {
      this.lost++;
      return;
    }
    // Many writes to one file in a row are one change to report.
    const last = this.queue[this.queue.length - 1];
    if (
      event.kind === "change" &&
      event.change === "write" &&
      last?.kind === "change" &&
      last.change === "write" &&
      last.path === event.path
    )
      return;
    this.queue.push(event);
    this.wake?.();
  }

  /** Parses the inotify records of one read (struct inotify_event: wd, mask, cookie, len, name). */
  private receive(bytes: Buffer): void {
    if (this.state !== "open") return;
    const movedFrom = new Map<number, { path: string; isDirectory: boolean }>();
    for (let at = 0; at + 16 <= bytes.length; ) {
      const wd = bytes.readInt32LE(at);
      const mask = bytes.readUInt32LE(at + 4);
      const cookie = bytes.readUInt32LE(at + 8);
      const length = bytes.readUInt32LE(at + 12);
      const rawName = bytes.subarray(at + 16, at + 16 + length);
      const end = rawName.indexOf(0);
      const name = (end < 0 ? rawName : rawName.subarray(0, end)).toString("utf8");
      at += 16 + length;
      this.handle(wd, mask, cookie, name, movedFrom);
    }
    // A move whose other half is not in this read left the watched tree.
    for (const moved of movedFrom.values())
      this.push({ kind: "change", change: "rename", path: "", oldPath: moved.path, isDirectory: moved.isDirectory });
  }

  private handle(
    wd: number,
    mask: number,
    cookie: number,
    name: string,
    movedFrom: Map<number, { path: string; isDirectory: boolean }>,
  ): void {
    if ((mask & IN_Q_OVERFLOW) !== 0) {
      this.push({ kind: "overflow", source: "kernel", lostEvents: 0, path: "" });
      return;
    }
    const directory = this.directories.get(wd);
    if (directory === undefined) return;
    if ((mask & IN_IGNORED) !== 0) {
      this.directories.delete(wd);
      return;
    }
    const isDirectory = (mask & IN_ISDIR) !== 0;
    const path = name === "" ? directory : `${directory === "/" ? "" : directory}/${name}`;
    if (!isDirectory && isTemporaryName(name)) {
      // A write's temporary: its own creation, writes, mode and removal are not the user's changes.
      if ((mask & IN_MOVED_FROM) !== 0) this.rememberTemporaryMove(cookie, name);
      return;
    }
    if ((mask & IN_MOVED_TO) !== 0 && this.temporaryMoves.has(cookie)) {
      const temporary = this.temporaryMoves.get(cookie)!;
      this.temporaryMoves.delete(cookie);
      const made = this.context.commits.replacedFile(temporary) === false;
      this.push({ kind: "change", change: made ? "create" : "write", path, oldPath: "", isDirectory: false });
      return;
    }
    if (wd === this.topWatch && (mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) !== 0) {
      const reason =
        (mask & IN_UNMOUNT) !== 0 ? "unmounted" : (mask & IN_MOVE_SELF) !== 0 ? "directory-moved" : "directory-removed";
      this.push({ kind: "ended", reason });
      this.state = "ended";
      return;
    }
    if ((mask & (IN_DELETE_SELF | IN_MOVE_SELF)) !== 0) return; // A subdirectory's: its parent reports it.
    if ((mask & IN_CREATE) !== 0) {
      this.push({ kind: "change", change: "create", path, oldPath: "", isDirectory });
      if (isDirectory && this.options.recursive) this.watchNew(path);
    } else if ((mask & IN_MODIFY) !== 0) {
      this.push({ kind: "change", change: "write", path, oldPath: "", isDirectory });
    } else if ((mask & IN_DELETE) !== 0) {
      this.push({ kind: "change", change: "remove", path, oldPath: "", isDirectory });
    } else if ((mask & IN_ATTRIB) !== 0) {
      this.push({ kind: "change", change: "attribute", path, oldPath: "", isDirectory });
    } else if ((mask & IN_MOVED_FROM) !== 0) {
      movedFrom.set(cookie, { path, isDirectory });
    } else if ((mask & IN_MOVED_TO) !== 0) {
      const from = movedFrom.get(cookie);
      movedFrom.delete(cookie);
      this.push({ kind: "change", change: "rename", path, oldPath: from?.path ?? "", isDirectory });
      if (isDirectory && this.options.recursive) {
        if (from !== undefined) this.renameDirectories(from.path, path);
        else this.watchNew(path);
      }
    }
  }

  /** Remembers a temporary's move until its other half (a few at most: each write has one). */
  private rememberTemporaryMove(cookie: number, name: string): void {
    this.temporaryMoves.set(cookie, name);
    if (this.temporaryMoves.size > 64) this.temporaryMoves.delete(this.temporaryMoves.keys().next().value as number);
  }

  /** A watched directory moved within the tree: its watches (and those under it) keep working, under new paths. */
  private renameDirectories(from: string, to: string): void {
    for (const [wd, path] of this.directories) {
      if (path === from) this.directories.set(wd, to);
      else if (path.startsWith(`${from}/`)) this.directories.set(wd, to + path.slice(from.length));
    }
  }

  /** Watches a directory that appeared, and reports what it already holds. */
  private watchNew(path: string): void {
    const adding = (async () => {
      const { resolver, calls } = this.context;
      let fd: number;
      try {
        fd = await resolver.open(resolver.locate(path), O_PATH | fsConstants.O_DIRECTORY, false);
      } catch {
        return; // Gone again, or replaced by a symlink: nothing to watch.
      }
      try {
        if (await this.addWatchFor(fd, path, false)) await this.watchTree(fd, path, true);
      } finally {
        await calls.close(fd);
      }
    })();
    this.adding = this.adding.then(() => adding).catch(() => {});
  }

  /**
   * Adds a watch on directory `fd`; false when it cannot be watched. Past a limit, the initial tree
   * fails the watch (LIMIT_EXCEEDED), a later directory is an overflow event naming it.
   */
  private async addWatchFor(fd: number, path: string, initial: boolean): Promise<boolean> {
    if (this.instance === undefined || this.state !== "open") return false;
    if (this.directories.size >= this.maxDirectories) {
      if (initial) throw watchLimit("max-watched-directories", undefined, this.maxDirectories);
      this.push({ kind: "overflow", source: "watch-limit", lostEvents: 0, path });
      return false;
    }
    try {
      this.directories.set(await this.context.calls.addWatch(this.instance.fd, fd, watchMask), path);
      return true;
    } catch (error) {
      if (errnoOf(error) !== "ENOSPC") return false; // Gone, or not readable by the user.
      if (initial) throw watchLimit("fs.inotify.max_user_watches", error);
      this.push({ kind: "overflow", source: "watch-limit", lostEvents: 0, path });
      return false;
    }
  }

  /** Watches every directory under `fd` (already watched); with `report`, a create for each entry found. */
  private async watchTree(fd: number, path: string, report: boolean): Promise<void> {
    const { calls } = this.context;
    const dir = await calls.reopen(fd, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY).catch(() => undefined);
    if (dir === undefined) return; // Not readable by the user: watched, not descended into.
    try {
      const { names, types } = await calls.readdir(dir);
      for (let index = 0; index < names.length && this.state === "open"; index++) {
        const name = names[index];
        const child = `${path === "/" ? "" : path}/${name}`;
        let type = types[index];
        if (type === DT_UNKNOWN) {
          const raw = await calls.stat(dir, name).catch(() => undefined);
          type = raw !== undefined && (raw.mode & fsConstants.S_IFMT) === fsConstants.S_IFDIR ? DT_DIR : DT_UNKNOWN;
        }
        if (report && (type === DT_DIR || !isTemporaryName(name)))
          this.push({ kind: "change", change: "create", path: child, oldPath: "", isDirectory: type === DT_DIR });
        if (type !== DT_DIR) continue;
        const sub = await calls
          .openAt(dir, name, O_PATH | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW)
          .catch(() => undefined);
        if (sub === undefined) continue;
        try {
          if (await this.addWatchFor(sub, child, !report)) await this.watchTree(sub, child, report);
        } finally {
          await calls.close(sub);
        }
      }
    } finally {
      await calls.close(dir);
    }
  }
}

function watchLimit(limit: string, cause: unknown, value?: number): FileError {
  const what =
    value === undefined
      ? `the kernel's inotify limit is reached (${limit})`
      : `too many directories to watch: the limit of ${value} is reached`;
  return new FileError(what, "LIMIT_EXCEEDED", {
    metadata: { limit, value: value === undefined ? "" : String(value) },
    cause,
  });
}
