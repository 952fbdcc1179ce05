import { abortableDelay, linkSignals } from "../../shared/abort.js";
import { backoffDelay, classifyFailure, SandboxError } from "../core/index.js";
import type { WatchResponse } from "../../../gen/sandbox/v1/files_pb.js";
import {
  changeKindOf,
  type FileChangeKind,
  type FileInfo,
  fileInfoFromProto,
  overflowKindOf,
  endKindOf,
  type WatchEndKind,
  type WatchOverflowKind,
} from "./file-info.js";
import type { FilesContext } from "./files-context.js";

/** Options of `watch()`. */
export interface WatchOptions {
  /** Watch subdirectories too, those created while watching included. Default false. */
  recursive?: boolean;
  /** Ends the watch; its iteration then throws the signal's reason (as Node's `fs.promises.watch` does). */
  signal?: AbortSignal;
}

/** A change under a watched directory. */
export interface FileChangeEvent {
  /** What happened: `create`, `write`, `remove`, `rename` or `attribute`. */
  type: FileChangeKind;
  /** Absolute path of the entry (its new path for a rename; empty for a move out of the watch). */
  path: string;
  /** For a rename, the entry's path before it (empty for a move in from outside the watch). */
  oldPath?: string;
  /** Whether the entry is a directory. */
  isDirectory: boolean;
}

/**
 * Changes were lost: the kernel's queue overflowed (`kernel`), this client read more slowly than
 * changes happened (`client`), a new subdirectory could not be watched (`watch-limit`, `path`
 * says which), or the connection broke and the watch was set up again on a new one (`reconnect`:
 * changes in between are unknown). A client keeping a copy in sync should list the directory again.
 */
export interface WatchOverflowEvent {
  /** Always `overflow`. */
  type: "overflow";
  /** Where the changes were lost: the daemon's sources, or `reconnect`, this client's. */
  source: WatchOverflowKind | "reconnect";
  /** How many changes the daemon dropped, when it knows (0 for the kernel's). */
  lostEvents: number;
  /** For `watch-limit`, the directory left unwatched. */
  path?: string;
}

/** What a watch yields. */
export type FileWatchEvent = FileChangeEvent | WatchOverflowEvent;

/**
 * FileWatch is a watch in place on a directory (E2B's `WatchHandle`, iterated as Node's
 * `fs.promises.watch` is): every change after `watch()` resolved is yielded, in order, with an
 * `overflow` event where changes were lost. A watch whose connection breaks is set up again on a
 * new one (with the sandbox's reconnect backoff) and says so with an `overflow` event of source
 * `reconnect`, since changes in between are unknown. The iteration ends when {@link close} is
 * called (or the loop is left, which closes it) and when the watch ends by itself (the directory
 * was removed or moved away: {@link endReason} says which). One loop iterates it; the client keeps
 * nothing but the event in hand.
 */
export class FileWatch implements AsyncIterable<FileWatchEvent>, AsyncDisposable {
  /** The watched directory. */
  readonly directory: FileInfo;
  /** How many directories the daemon watches (1 unless recursive). */
  readonly watchedDirectories: number;
  /** Why the watch ended by itself, once it did: `directory-removed`, `directory-moved` or `unmounted`. */
  endReason?: WatchEndKind;
  private iterated = false;
  private events: AsyncIterator<WatchResponse>;
  private goAways: number;

  /** Internal: made by `watch()` once the daemon confirmed the watch; `reopen` sets it up again on the same signal. */
  constructor(
    opened: OpenedWatch,
    private readonly reopen: () => Promise<OpenedWatch>,
    private readonly call: { abort(reason?: unknown): void; readonly signal: AbortSignal },
    private readonly context: FilesContext,
    private readonly userSignal: AbortSignal | undefined,
  ) {
    this.directory = opened.directory;
    this.watchedDirectories = opened.watchedDirectories;
    this.events = opened.events;
    this.goAways = context.goAwayCount();
  }

  /** Ends the watch (the call is cancelled); a loop over it ends quietly. Idempotent. */
  close(): void {
    this.call.abort(closed);
  }

  /** Closes the watch, for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  /** Yields the changes; see {@link FileWatch}. Iterating a second time is a SandboxError INVALID_ARGUMENT. */
  async *[Symbol.asyncIterator](): AsyncGenerator<FileWatchEvent, void, undefined> {
    if (this.iterated) throw new SandboxError("a FileWatch is iterated by one loop only", "INVALID_ARGUMENT");
    this.iterated = true;
    try {
      for (;;) {
        let next: IteratorResult<WatchResponse>;
        try {
          next = await this.events.next();
        } catch (error) {
          if (!(await this.reconnect(error))) return;
          yield { type: "overflow", source: "reconnect", lostEvents: 0 };
          continue;
        }
        if (next.done === true) {
          if (this.endReason === undefined && !this.call.signal.aborted) {
            throw this.context.fail(
              new SandboxError(`the watch of ${this.directory.path} ended without its end event`, "NO_END"),
            );
          }
          return;
        }
        const { event } = next.value;
        if (event.case === "change") {
          const change = event.value;
          yield {
            type: changeKindOf(change.type),
            path: change.path,
            ...(change.oldPath === "" ? {} : { oldPath: change.oldPath }),
            isDirectory: change.isDirectory,
          };
        } else if (event.case === "overflow") {
          const overflow = event.value;
          yield {
            type: "overflow",
            source: overflowKindOf(overflow.source),
            lostEvents: Number(overflow.lostEvents),
            ...(overflow.path === "" ? {} : { path: overflow.path }),
          };
        } else if (event.case === "ended") {
          this.endReason = endKindOf(event.value.reason);
        }
      }
    } finally {
      this.close();
    }
  }

  /**
   * Sets the watch up again after its stream failed with `error`, with the sandbox's backoff:
   * true once it is in place, false when the watch was closed meanwhile. A failure that is not the
   * connection's (the directory is gone, a limit) or too many in a row is thrown.
   */
  private async reconnect(error: unknown): Promise<boolean> {
    let failures = 0;
    for (;;) {
      if (this.userSignal?.aborted) throw this.userSignal.reason;
      if (this.call.signal.aborted) return false;
      const kind = classifyFailure(error, this.context.goAwayCount() > this.goAways);
      const settings = this.context.reconnect();
      if (kind === "fatal" || ++failures > settings.maxAttempts) throw this.context.fail(error);
      this.goAways = this.context.goAwayCount();
      // An abort during the wait is seen at the top of the loop.
      if (kind === "transient")
        await abortableDelay(backoffDelay(failures, Math.random, settings), this.call.signal).catch(() => {});
      if (this.call.signal.aborted) continue;
      try {
        this.events = (await this.reopen()).events;
        return true;
      } catch (failed) {
        error = failed;
      }
    }
  }
}

/** A watch the daemon confirmed: its first event's facts, and the events after it. */
interface OpenedWatch {
  directory: FileInfo;
  watchedDirectories: number;
  events: AsyncIterator<WatchResponse>;
}

/** Opens a Watch call and reads its `started` event; failures are thrown as they came. */
async function openWatch(
  context: FilesContext,
  path: string,
  recursive: boolean,
  signal: AbortSignal,
): Promise<OpenedWatch> {
  const events = context.client().watch({ path, recursive }, { signal })[Symbol.asyncIterator]();
  const first = await events.next();
  if (first.done === true || first.value.event.case !== "started") {
    throw new SandboxError(`the watch of ${path} did not start with its started event`, "NO_START");
  }
  const started = first.value.event.value;
  return { directory: fileInfoFromProto(started.stat!), watchedDirectories: started.watchedDirectories, events };
}

/** The reason a watch closed by its owner is cancelled with. */
const closed = new SandboxError("the watch was closed", "CANCELED");

/**
 * Starts watching a directory and resolves once the daemon's watches are in place (its first
 * event), so every change after that is reported. A path that is not a directory is a SandboxError
 * FAILED_PRECONDITION (NOT_A_DIRECTORY); the daemon's watch limits are LimitExceededErrors.
 */
export async function watchDirectory(
  context: FilesContext,
  path: string,
  options: WatchOptions = {},
): Promise<FileWatch> {
  const call = linkSignals(options.signal);
  const recursive = options.recursive === true;
  try {
    const opened = await openWatch(context, path, recursive, call.signal);
    return new FileWatch(opened, () => openWatch(context, path, recursive, call.signal), call, context, options.signal);
  } catch (error) {
    call.abort();
    if (options.signal?.aborted) throw options.signal.reason;
    throw context.fail(error);
  }
}
