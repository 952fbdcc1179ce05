import { constants as fsConstants, fstat, read } from "node:fs";
import { abortableDelay } from "../shared/abort.js";
import { FileError, fileErrorOf } from "./errors.js";
import { fileStatOf, type FileStat } from "./file-stat.js";
import { O_PATH } from "./native-calls.js";
import type { FilesContext } from "./context.js";

/**
 * Default bytes of one chunk of a read: 1 MiB, a quarter of the 4 MiB message every gRPC client takes
 * by default (fewer, larger messages: 1 GiB down through Read cost the daemon 2.2-2.9 s of CPU in
 * 1 MiB chunks, 3.0-3.7 s in 256 KiB ones, on a loaded machine).
 */
export const defaultReadChunkBytes = 1024 * 1024;

/** Options of a read. */
export interface ReadOptions {
  /** Byte offset of the first byte. Default 0. */
  offset?: number;
  /** Most bytes to send; to the end of the file when undefined. */
  length?: number;
  /** Bytes of one chunk. Default {@link defaultReadChunkBytes}. */
  chunkBytes?: number;
}

/** What stopped a read before the end of its file. */
export type ReadLimit = "length" | "size-at-open" | "max-unsized-read-bytes";

/** One event of a read after its stat: bytes, then perhaps a limit, then the end. */
export type ReadEvent =
  | { kind: "chunk"; offset: number; data: Buffer }
  | { kind: "limit"; limit: ReadLimit; limitBytes: number }
  | { kind: "end"; bytesRead: number; endOffset: number; eof: boolean };

/**
 * FileReader is a file opened for a streamed read. A regular file with a size is read up to the size
 * it had when opened (`stat.sizeBytes`), so a file that grows forever cannot hold a read forever;
 * anything else (a device such as /dev/zero, a /proc file that says size 0) until its end or the
 * daemon's maximum for such files. Bytes are read only as the consumer asks for them: a slow reader
 * pauses the read.
 */
export interface FileReader {
  /** The file as opened. */
  readonly stat: FileStat;
  /** For a regular file with a size: exactly how many bytes the read sends unless the file shrinks. */
  readonly plannedBytes: number | undefined;
  /** The chunks, a limit when one stopped the read, and the end; closes the file when done. */
  events(signal?: AbortSignal): AsyncGenerator<ReadEvent>;
  /**
   * Closes the file, once a read in flight is done (also done by `events` when it finishes). Call it
   * when the consumer stops without finishing `events`: a generator parked on a `yield` never runs
   * its own `finally`.
   */
  close(): Promise<void>;
}

/** Opens `requested` for a read; every refusal comes from here, before a byte is read. */
export async function openFileReader(
  context: FilesContext,
  requested: string,
  options: ReadOptions,
): Promise<FileReader> {
  const { resolver, calls, names, maxUnsizedReadBytes } = context;
  const offset = options.offset ?? 0;
  const length = options.length;
  const chunkBytes = options.chunkBytes ?? defaultReadChunkBytes;
  const location = resolver.locate(requested);
  const handle = await resolver.open(location, O_PATH, true);
  let fd: number;
  let stat: FileStat;
  try {
    const raw = await calls.stat(handle, "");
    stat = fileStatOf(location.display, raw, names);
    if (stat.kind === "directory")
      throw new FileError(`is a directory: ${requested}`, "IS_A_DIRECTORY", { metadata: { path: requested } });
    if (stat.kind === "fifo" || stat.kind === "socket") {
      throw new FileError(`not a regular file: ${requested}`, "NOT_A_REGULAR_FILE", {
        metadata: { path: requested, type: stat.kind.toUpperCase() },
      });
    }
    // A device that has nothing to read would block a thread of the pool: it is read without blocking.
    const nonBlocking = stat.kind === "character-device" ? fsConstants.O_NONBLOCK : 0;
    fd = await calls.reopen(handle, fsConstants.O_RDONLY | fsConstants.O_NOCTTY | nonBlocking);
  } catch (error) {
    throw fileErrorOf(error, requested);
  } finally {
    await calls.close(handle);
  }
  const sized = stat.kind === "file" && stat.sizeBytes > 0;
  const cap = sized ? Math.max(0, stat.sizeBytes - offset) : maxUnsizedReadBytes;
  const stopAt = Math.min(length ?? Number.POSITIVE_INFINITY, cap);
  let closed = false;
  // A read in flight holds the fd: closing waits for it, so the number is never reused under it.
  let reading: Promise<unknown> = Promise.resolve();
  const close = async () => {
    if (closed) return;
    closed = true;
    await reading.catch(() => {});
    await calls.close(fd);
  };
  return {
    stat,
    plannedBytes: sized ? stopAt : undefined,
    close,
    async *events(signal) {
      let sent = 0;
      let eof = false;
      // A regular file's next chunk is read while the consumer takes this one (one chunk ahead at
      // most, so a slow consumer still pauses the read). A device is read only when asked: bytes
      // read ahead of a consumer that stops would be lost to everyone else.
      let ahead: { position: number; buffer: Buffer; count: Promise<number | undefined> } | undefined;
      const start = (position: number) => {
        const buffer = Buffer.allocUnsafe(Math.min(chunkBytes, offset + stopAt - position));
        const count = readAt(fd, buffer, position);
        reading = count;
        // Settled by whoever takes it; a read ahead nobody takes must not be an unhandled rejection.
        count.catch(() => {});
        return { position, buffer, count };
      };
      try {
        while (sent < stopAt) {
          signal?.throwIfAborted();
          if (closed)
            throw new FileError(`the read of ${requested} was closed`, "FILE_BUSY", {
              metadata: { path: requested, errno: "EBADF" },
            });
          const { buffer, count: pending } = ahead ?? start(offset + sent);
          ahead = undefined;
          const count = await pending.catch((error: unknown) => {
            throw fileErrorOf(error, requested);
          });
          if (count === undefined) {
            // A device with nothing to read yet.
            await abortableDelay(20, signal);
            continue;
          }
          if (count === 0) {
            eof = true;
            break;
          }
          if (stat.kind === "file" && sent + count < stopAt && !closed) ahead = start(offset + sent + count);
          yield {
            kind: "chunk",
            offset: offset + sent,
            data: count === buffer.length ? buffer : buffer.subarray(0, count),
          };
          sent += count;
        }
        const position = offset + sent;
        if (!eof) {
          const now = sized ? await sizeOf(fd) : undefined;
          if (length !== undefined && sent >= length && length <= cap) {
            // The caller's range ends here: the end of the file if it ends here too.
            if (now !== undefined && position >= now) eof = true;
            else yield { kind: "limit", limit: "length", limitBytes: length };
          } else if (sized) {
            if (now !== undefined && now > position)
              yield { kind: "limit", limit: "size-at-open", limitBytes: stat.sizeBytes };
            else eof = true;
          } else {
            yield { kind: "limit", limit: "max-unsized-read-bytes", limitBytes: maxUnsizedReadBytes };
          }
        }
        yield { kind: "end", bytesRead: sent, endOffset: position, eof };
      } finally {
        await close();
      }
    },
  };
}

/** pread; undefined when a non-blocking device has nothing yet (EAGAIN). */
function readAt(fd: number, buffer: Buffer, position: number): Promise<number | undefined> {
  return new Promise((resolve, reject) =>
    read(fd, buffer, 0, buffer.length, position, (error, count) => {
      if (error?.code === "EAGAIN") resolve(undefined);
      else if (error) reject(error);
      else resolve(count);
    }),
  );
}

function sizeOf(fd: number): Promise<number | undefined> {
  return new Promise((resolve) => fstat(fd, (error, stats) => resolve(error ? undefined : stats.size)));
}
