import { randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { chmod, open, rename, unlink } from "node:fs/promises";
import path from "node:path";
import { Readable } from "node:stream";
import { TextDecoder } from "node:util";
import { pipeline } from "node:stream/promises";
import { abortableDelay } from "../../shared/abort.js";
import { backoffDelay, checkOptions, classifyFailure, optionNames, SandboxError } from "../core/index.js";
import { type FileInfo, fileInfoFromProto } from "./file-info.js";
import type { FilesContext } from "./files-context.js";
import {
  checkedNumber,
  collectBytes,
  readChunks,
  type ReadProgress,
  type ReadRangeOptions,
  toReadableStream,
} from "./read.js";
import { type FileWatch, watchDirectory, type WatchOptions } from "./watch.js";
import { parseMode, type WriteData, writeFile, type WriteOptions } from "./write.js";

/** Options of `read()`: the byte range, the signal, and what to return (E2B's `format`). */
export interface ReadOptions extends ReadRangeOptions {
  /**
   * What to return: `text` (the default, as E2B's `read`), `bytes` (a Uint8Array) or `stream` (a
   * web ReadableStream of Uint8Array chunks, also an async iterable, read as it is consumed).
   */
  format?: "text" | "bytes" | "stream";
  /** Encoding of `text`; `utf-8` by default. */
  encoding?: string;
}

/** Options of the calls that take nothing but a signal. */
export interface SignalOptions {
  /** Cancels the call; it then rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of `stat()`. */
export interface StatOptions extends SignalOptions {
  /** Describe what a symlink points to (inside the workspace) instead of the link. Default false. */
  followSymlinks?: boolean;
}

/** Options of `list()`. */
export interface ListOptions extends SignalOptions {
  /** How deep to descend: 1 (the default) lists the directory's entries, 2 their entries too, up to 64. */
  depth?: number;
}

/** Options of `mkdir()`. */
export interface MkdirOptions extends SignalOptions {
  /** Create missing parents, and succeed when the directory exists (as `mkdir -p` and Cloudflare's `recursive`). */
  recursive?: boolean;
  /** Permission bits of the directories created (`0o755` by default), applied exactly. */
  mode?: number | string;
}

/** Options of `remove()`. */
export interface RemoveOptions extends SignalOptions {
  /** Remove a directory with everything in it (symlinks inside are removed, never followed). Default false. */
  recursive?: boolean;
  /** Succeed when nothing is at the path (as `rm -f` and Node's `fs.rm`'s `force`). Default false. */
  force?: boolean;
}

/** Options of `rename()`. */
export interface RenameOptions extends SignalOptions {
  /** Replace what exists at the new path (a file by a file, an empty directory by a directory). Default false. */
  overwrite?: boolean;
}

/** Options of `uploadFile()`: those of `write()`; the mode defaults to the local file's. */
export type UploadOptions = WriteOptions;

/** Options of `downloadFile()`. */
export interface DownloadOptions extends SignalOptions {
  /** Permission bits of the local file; the remote file's by default. */
  mode?: number | string;
  /** Called with the number of bytes received so far, after each chunk (at most 1 MiB apart). */
  onProgress?: (bytesReceived: number) => void;
}

const readOptionNames = optionNames<ReadOptions>({
  offset: true,
  length: true,
  signal: true,
  format: true,
  encoding: true,
});
const rangeOptionNames = optionNames<ReadRangeOptions>({ offset: true, length: true, signal: true });
const writeOptionNames = optionNames<WriteOptions>({
  mode: true,
  createParents: true,
  overwrite: true,
  expectedSize: true,
  expectedSha256: true,
  signal: true,
  onProgress: true,
});
const statOptionNames = optionNames<StatOptions>({ followSymlinks: true, signal: true });
const listOptionNames = optionNames<ListOptions>({ depth: true, signal: true });
const mkdirOptionNames = optionNames<MkdirOptions>({ recursive: true, mode: true, signal: true });
const removeOptionNames = optionNames<RemoveOptions>({ recursive: true, force: true, signal: true });
const renameOptionNames = optionNames<RenameOptions>({ overwrite: true, signal: true });
const signalOptionNames = optionNames<SignalOptions>({ signal: true });
const watchOptionNames = optionNames<WatchOptions>({ recursive: true, signal: true });
const downloadOptionNames = optionNames<DownloadOptions>({ mode: true, signal: true, onProgress: true });

/**
 * SandboxFiles is a sandbox's file API (`sandbox.files`): the files of the daemon's machine inside
 * its workspace roots, read and written as streams. Its names are E2B's `sandbox.files` (read,
 * write, list, exists, makeDir, remove, rename, getInfo, watchDir), with Cloudflare's and Node's
 * where E2B has none (mkdir with `recursive`, stat, chmod, watch as an async iterable), and
 * Daytona's `uploadFile`/`downloadFile` for local files.
 *
 * Paths are relative to the daemon's first workspace root, or absolute inside a root. Every call
 * takes an AbortSignal and fails with a SandboxError whose `reason` is the daemon's
 * (`PATH_NOT_FOUND` as a {@link FileNotFoundError}, `PATH_ALREADY_EXISTS` as a
 * {@link FileExistsError}, `PATH_OUTSIDE_WORKSPACE`, `IS_A_DIRECTORY`, ...). Nothing is held whole
 * unless asked: streamed reads and writes keep one chunk of at most 1 MiB at a time. A streamed
 * read whose connection breaks resumes where it left off, a watch is set up again, a stat or a page
 * of a listing is tried again; a write, or any call that changes something, is never retried.
 */
export class SandboxFiles {
  /** Internal: a sandbox makes its own (`sandbox.files`). */
  constructor(private readonly context: FilesContext) {}

  /**
   * Reads a file, as E2B's `files.read(path, { format })`: its text (the default), its bytes, or a
   * ReadableStream of its chunks; `offset` and `length` read a range. A file that grows while it is
   * read is read up to the size it had when opened. A read of a file without a size (a device, a
   * /proc file) that the daemon stops at its limit fails with ReadLimitError: give a `length`.
   */
  read(path: string, options?: ReadOptions & { format?: "text" }): Promise<string>;
  read(path: string, options: ReadOptions & { format: "bytes" }): Promise<Uint8Array>;
  read(path: string, options: ReadOptions & { format: "stream" }): Promise<ReadableStream<Uint8Array>>;
  async read(path: string, options: ReadOptions = {}): Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    checkOptions(options, readOptionNames, "read");
    const { format = "text", encoding = "utf-8", ...range } = options;
    if (format === "stream") return toReadableStream(readChunks(this.context, path, range));
    const bytes = await collectBytes(readChunks(this.context, path, range));
    if (format === "bytes") return bytes;
    if (format !== "text")
      throw new SandboxError(
        `read: format must be "text", "bytes" or "stream", not ${JSON.stringify(format)}`,
        "INVALID_ARGUMENT",
      );
    return decoderFor(encoding).decode(bytes);
  }

  /**
   * A file's chunks as an async iterable of Uint8Arrays, read as the loop asks (leaving the loop
   * cancels the read); `progress.offset` is the offset after the last chunk handed over, where the
   * read resumes by itself after a broken connection. The lower-level form of `read(path, {
   * format: "stream" })`.
   */
  iterate(
    path: string,
    options: ReadRangeOptions = {},
    progress?: ReadProgress,
  ): AsyncGenerator<Uint8Array, void, undefined> {
    checkOptions(options, rangeOptionNames, "iterate");
    return readChunks(this.context, path, options, progress);
  }

  /**
   * Creates or replaces a file with `data` (text, bytes, a Blob, a ReadableStream or any
   * iterable), as E2B's `files.write(path, data)` and Cloudflare's `writeFile`, and resolves with
   * the new file's info. Streamed: a 10 GiB stream takes the memory of one 1 MiB message. Atomic: a
   * reader sees the old file or the new one; cancelled (`signal`) or failed, nothing is left
   * behind. Missing parents are created unless `createParents: false`.
   */
  write(path: string, data: WriteData, options: WriteOptions = {}): Promise<FileInfo> {
    checkOptions(options, writeOptionNames, "write");
    return writeFile(this.context, path, data, options);
  }

  /**
   * Uploads a local file to `remotePath`, streamed, as Daytona's `fs.uploadFile(localPath,
   * remotePath)`; the new file gets the local file's permission bits unless `mode` says otherwise.
   */
  async uploadFile(localPath: string, remotePath: string, options: UploadOptions = {}): Promise<FileInfo> {
    checkOptions(options, writeOptionNames, "uploadFile");
    const handle = await open(localPath, "r").catch((error: NodeJS.ErrnoException) => {
      throw new SandboxError(`cannot read ${localPath}: ${error.code ?? error.message}`, "INVALID_ARGUMENT", {
        cause: error,
        metadata: { path: localPath },
      });
    });
    try {
      const local = await handle.stat();
      if (!local.isFile())
        throw new SandboxError(`${localPath} is not a regular file`, "INVALID_ARGUMENT", {
          metadata: { path: localPath },
        });
      const stream = handle.createReadStream({ highWaterMark: 1024 * 1024, autoClose: false });
      try {
        return await writeFile(this.context, remotePath, stream, { mode: local.mode & 0o7777, ...options });
      } finally {
        stream.destroy();
      }
    } finally {
      await handle.close();
    }
  }

  /**
   * Downloads `remotePath` to a local file, streamed, as Daytona's `fs.downloadFile(remotePath,
   * localPath)`: written to a temporary file beside `localPath` and renamed into place at the end,
   * so a cancelled or failed download leaves nothing; the file gets the remote file's permission
   * bits unless `mode` says otherwise. Resolves with the remote file's info.
   */
  async downloadFile(remotePath: string, localPath: string, options: DownloadOptions = {}): Promise<FileInfo> {
    checkOptions(options, downloadOptionNames, "downloadFile");
    const progress: ReadProgress = { offset: 0, resumes: 0 };
    const temporary = path.join(
      path.dirname(localPath),
      `.${path.basename(localPath)}.${randomBytes(6).toString("hex")}.download`,
    );
    const chunks = readChunks(this.context, remotePath, { signal: options.signal }, progress);
    const counted = async function* () {
      let received = 0;
      for await (const chunk of chunks) {
        yield chunk;
        received += chunk.length;
        options.onProgress?.(received);
      }
    };
    try {
      await pipeline(Readable.from(counted(), { objectMode: false }), createWriteStream(temporary, { mode: 0o600 }), {
        signal: options.signal,
      });
      await chmod(temporary, options.mode === undefined ? progress.stat!.mode & 0o7777 : parseMode(options.mode));
      await rename(temporary, localPath);
      return progress.stat!;
    } catch (error) {
      await unlink(temporary).catch(() => {});
      if (options.signal?.aborted) throw options.signal.reason;
      throw error;
    }
  }

  /**
   * Lists a directory, every page of it, ordered by path (a directory's entries right after it):
   * E2B's `files.list(path, { depth })` (Cloudflare's `listFiles`). Symlinks are listed, never
   * descended into.
   */
  async list(path: string, options: ListOptions = {}): Promise<FileInfo[]> {
    checkOptions(options, listOptionNames, "list");
    const entries: FileInfo[] = [];
    for await (const entry of this.entries(path, options)) entries.push(entry);
    return entries;
  }

  /** The entries of {@link list} one at a time, fetching a page (1000 entries) when the loop needs it. */
  async *entries(path: string, options: ListOptions = {}): AsyncGenerator<FileInfo, void, undefined> {
    checkOptions(options, listOptionNames, "entries");
    const depth = options.depth === undefined ? 0 : checkedNumber(options.depth, "depth");
    let pageToken = "";
    do {
      const page = await this.call(
        () => this.context.client().list({ path, depth, pageToken }, { signal: options.signal }),
        options.signal,
        "retry",
      );
      for (const entry of page.entries) yield fileInfoFromProto(entry);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** Describes a file, directory or symlink (Node's `fs.stat`; `followSymlinks` for what a symlink points to). */
  async stat(path: string, options: StatOptions = {}): Promise<FileInfo> {
    checkOptions(options, statOptionNames, "stat");
    const response = await this.call(
      () =>
        this.context
          .client()
          .stat({ path, followSymlinks: options.followSymlinks === true }, { signal: options.signal }),
      options.signal,
      "retry",
    );
    return fileInfoFromProto(response.stat!);
  }

  /** The same as {@link stat}, under E2B's name. */
  getInfo(path: string, options: StatOptions = {}): Promise<FileInfo> {
    return this.stat(path, options);
  }

  /** Whether something (a symlink included, even a dangling one) exists at the path, as E2B's and Cloudflare's `exists`. */
  async exists(path: string, options: SignalOptions = {}): Promise<boolean> {
    checkOptions(options, signalOptionNames, "exists");
    try {
      await this.stat(path, options);
      return true;
    } catch (error) {
      if (error instanceof SandboxError && error.reason === "PATH_NOT_FOUND") return false;
      throw error;
    }
  }

  /**
   * Creates a directory, as Cloudflare's `mkdir(path, { recursive })`: with `recursive`, missing
   * parents too, and an existing directory is no error; otherwise an existing entry is a
   * FileExistsError. Resolves with the directory's info.
   */
  async mkdir(path: string, options: MkdirOptions = {}): Promise<FileInfo> {
    checkOptions(options, mkdirOptionNames, "mkdir");
    return (await this.makeDirectory(path, options)).stat;
  }

  /**
   * Creates a directory and its missing parents, as E2B's `files.makeDir(path)`: resolves with
   * true when it created it, false when it already existed.
   */
  async makeDir(path: string, options: SignalOptions = {}): Promise<boolean> {
    checkOptions(options, signalOptionNames, "makeDir");
    return (await this.makeDirectory(path, { ...options, recursive: true })).created;
  }

  /**
   * Removes a file, a symlink (never what it points to) or a directory: an empty one, or with
   * everything in it when `recursive` (E2B's `files.remove`, Node's `fs.rm`, Cloudflare's
   * `deleteFile`). `force` makes a missing path no error.
   */
  async remove(path: string, options: RemoveOptions = {}): Promise<void> {
    checkOptions(options, removeOptionNames, "remove");
    try {
      await this.call(
        () => this.context.client().remove({ path, recursive: options.recursive === true }, { signal: options.signal }),
        options.signal,
      );
    } catch (error) {
      if (options.force === true && error instanceof SandboxError && error.reason === "PATH_NOT_FOUND") return;
      throw error;
    }
  }

  /**
   * Renames (moves) a file, symlink or directory atomically within one filesystem, as E2B's
   * `files.rename(oldPath, newPath)` and Cloudflare's `renameFile`/`moveFile`; an existing
   * destination is a FileExistsError unless `overwrite`. Resolves with the entry at its new path.
   */
  async rename(oldPath: string, newPath: string, options: RenameOptions = {}): Promise<FileInfo> {
    checkOptions(options, renameOptionNames, "rename");
    const response = await this.call(
      () =>
        this.context
          .client()
          .move(
            { source: oldPath, destination: newPath, overwrite: options.overwrite === true },
            { signal: options.signal },
          ),
      options.signal,
    );
    return fileInfoFromProto(response.stat!);
  }

  /** Changes the permission bits of a file or directory (`0o755` or `"755"`), as Node's `fs.chmod`; resolves with its info. */
  async chmod(path: string, mode: number | string, options: SignalOptions = {}): Promise<FileInfo> {
    checkOptions(options, signalOptionNames, "chmod");
    const bits = parseMode(mode);
    const response = await this.call(
      () => this.context.client().chmod({ path, mode: bits }, { signal: options.signal }),
      options.signal,
    );
    return fileInfoFromProto(response.stat!);
  }

  /**
   * Watches a directory and resolves once the watch is in place, as E2B's `files.watchDir` (whose
   * handle's `stop()` is `close()` here) iterated as Node's `fs.promises.watch`: `for await (const
   * event of watch)` yields every change after that, and `overflow` events where changes were lost.
   */
  watch(path: string, options: WatchOptions = {}): Promise<FileWatch> {
    checkOptions(options, watchOptionNames, "watch");
    return watchDirectory(this.context, path, options);
  }

  private async makeDirectory(path: string, options: MkdirOptions): Promise<{ stat: FileInfo; created: boolean }> {
    const mode = options.mode === undefined ? undefined : parseMode(options.mode);
    const response = await this.call(
      () =>
        this.context.client().makeDir({ path, parents: options.recursive === true, mode }, { signal: options.signal }),
      options.signal,
    );
    return { stat: fileInfoFromProto(response.stat!), created: response.created };
  }

  /**
   * Runs one unary call: its failure as a SandboxError, or the signal's reason when it was
   * cancelled. A call that changes nothing (Stat, a page of List) is tried again after a failure of
   * the connection, with the sandbox's backoff; the others are never repeated.
   */
  private async call<T>(run: () => Promise<T>, signal: AbortSignal | undefined, retry?: "retry"): Promise<T> {
    for (let failures = 1; ; failures++) {
      const goAways = this.context.goAwayCount();
      try {
        return await run();
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        const settings = this.context.reconnect();
        const kind =
          retry === undefined || error instanceof SandboxError
            ? "fatal"
            : classifyFailure(error, this.context.goAwayCount() > goAways);
        if (kind === "fatal" || failures > settings.maxAttempts) throw this.context.fail(error);
        if (kind === "transient") await abortableDelay(backoffDelay(failures, Math.random, settings), signal);
      }
    }
  }
}

/** A TextDecoder for `encoding`, or a SandboxError INVALID_ARGUMENT naming it. */
function decoderFor(encoding: string): TextDecoder {
  try {
    return new TextDecoder(encoding);
  } catch (error) {
    throw new SandboxError(`unknown encoding: ${encoding}`, "INVALID_ARGUMENT", { cause: error });
  }
}
