import { linkSignals } from "../../shared/abort.js";
import { SandboxError } from "../core/index.js";
import type { WatchResponse } from "../../../gen/sandbox/v1/files_pb.js";
import { changeKindOf, type FileChangeKind, type FileInfo, fileInfoFromProto, overflowKindOf, endKindOf, type WatchEndKind, type WatchOverflowKind } from "./file-info.js";
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
 * changes happened (`client`), or a new subdirectory could not be watched (`watch-limit`, `path`
 * says which). A client keeping a copy in sync should list the directory again.
 */
export interface WatchOverflowEvent {
  /** Always `overflow`. */
  type: "overflow";
  /** Where the changes were lost. */
  source: WatchOverflowKind;
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
 * `overflow` event where changes were lost. The iteration ends when {@link close} is called (or
 * the loop is left, which closes it) and when the watch ends by itself (the directory was removed
 * or moved away: {@link endReason} says which). One loop iterates it; the client keeps nothing
 * but the event in hand.
 */
export class FileWatch implements AsyncIterable<FileWatchEvent>, AsyncDisposable {
  /** The watched directory. */
  readonly directory: FileInfo;
  /** How many directories the daemon watches (1 unless recursive). */
  readonly watchedDirectories: number;
  /** Why the watch ended by itself, once it did: `directory-removed`, `directory-moved` or `unmounted`. */
  endReason?: WatchEndKind;
  private iterated = false;

  /** Internal: made by `watch()` once the daemon confirmed the watch. */
  constructor(
    started: { directory: FileInfo; watchedDirectories: number },
    private readonly events: AsyncIterator<WatchResponse>,
    private readonly call: { abort(reason?: unknown): void; readonly signal: AbortSignal },
    private readonly context: FilesContext,
    private readonly userSignal: AbortSignal | undefined,
  ) {
    this.directory = started.directory;
    this.watchedDirectories = started.watchedDirectories;
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
          if (this.userSignal?.aborted) throw this.userSignal.reason;
          if (this.call.signal.aborted) return;
          throw this.context.fail(error);
        }
        if (next.done === true) {
          if (this.endReason === undefined && !this.call.signal.aborted) {
            throw this.context.fail(new SandboxError(`the watch of ${this.directory.path} ended without its end event`, "NO_END"));
          }
          return;
        }
        const { event } = next.value;
        if (event.case === "change") {
          const change = event.value;
          yield { type: changeKindOf(change.type), path: change.path, ...(change.oldPath === "" ? {} : { oldPath: change.oldPath }), isDirectory: change.isDirectory };
        } else if (event.case === "overflow") {
          const overflow = event.value;
          yield { type: "overflow", source: overflowKindOf(overflow.source), lostEvents: Number(overflow.lostEvents), ...(overflow.path === "" ? {} : { path: overflow.path }) };
        } else if (event.case === "ended") {
          this.endReason = endKindOf(event.value.reason);
        }
      }
    } finally {
      this.close();
    }
  }
}

/** The reason a watch closed by its owner is cancelled with. */
const closed = new SandboxError("the watch was closed", "CANCELED");

/**
 * Starts watching a directory and resolves once the daemon's watches are in place (its first
 * event), so every change after that is reported. A path that is not a directory is a SandboxError
 * FAILED_PRECONDITION (NOT_A_DIRECTORY); the daemon's watch limits are LimitExceededErrors.
 */
export async function watchDirectory(context: FilesContext, path: string, options: WatchOptions = {}): Promise<FileWatch> {
  const call = linkSignals(options.signal);
  try {
    const events = context.client().watch({ path, recursive: options.recursive === true }, { signal: call.signal })[Symbol.asyncIterator]();
    const first = await events.next();
    if (first.done === true || first.value.event.case !== "started") {
      throw new SandboxError(`the watch of ${path} did not start with its started event`, "NO_START");
    }
    const started = first.value.event.value;
    return new FileWatch({ directory: fileInfoFromProto(started.stat!), watchedDirectories: started.watchedDirectories }, events, call, context, options.signal);
  } catch (error) {
    call.abort();
    if (options.signal?.aborted) throw options.signal.reason;
    throw context.fail(error);
  }
}
