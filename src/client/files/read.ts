import { ReadLimit } from "../../../gen/sandbox/v1/files_pb.js";
import { abortableDelay, linkSignals } from "../../shared/abort.js";
import { backoffDelay, classifyFailure, SandboxError } from "../core/index.js";
import { type FileInfo, fileInfoFromProto } from "./file-info.js";
import type { FilesContext } from "./files-context.js";

/** Options of every read: a byte range and an abort signal. */
export interface ReadRangeOptions {
  /** Byte offset of the first byte to read; 0 by default. An offset past the end reads nothing. */
  offset?: number;
  /** Read at most this many bytes from `offset`; to the end of the file by default. */
  length?: number;
  /** Cancels the read; the call then rejects (or the stream errors) with the signal's reason. */
  signal?: AbortSignal;
}

/** What a read found out while it ran, filled in as it goes. */
export interface ReadProgress {
  /** The file as opened, once the daemon said. */
  stat?: FileInfo;
  /** Offset after the last byte handed over: where a resumed read starts. */
  offset: number;
  /** How many times the read resumed after its stream broke. */
  resumes: number;
}

/**
 * FileChangedError says a read could not resume after its connection broke because the file is not
 * the one it was reading (its size or modification time changed meanwhile): the bytes already
 * handed over and those after them would not belong to one file. Code `FILE_CHANGED`.
 */
export class FileChangedError extends SandboxError {
  /** The file. */
  readonly path: string;

  /** Creates the error for `path`; code `FILE_CHANGED`. */
  constructor(path: string, options: { cause?: unknown } = {}) {
    super(`${path} changed while it was read, so the read cannot resume after its connection broke`, "FILE_CHANGED", {
      ...options,
      metadata: { path },
    });
    this.name = "FileChangedError";
    this.path = path;
  }
}

/**
 * ReadLimitError says the daemon stopped a read of a file without a size (a device such as
 * /dev/zero, a file of /proc) at its `--max-unsized-read-bytes`, before the end: the bytes before
 * it were handed over, and the rest is not read. Ask for a `length` to read such a file on purpose.
 * Code `READ_LIMIT_REACHED`.
 */
export class ReadLimitError extends SandboxError {
  /** The file. */
  readonly path: string;
  /** The daemon's limit, in bytes. */
  readonly limitBytes: number;

  /** Creates the error for `path` and a limit of `limitBytes`; code `READ_LIMIT_REACHED`. */
  constructor(path: string, limitBytes: number) {
    super(
      `the daemon stopped reading ${path} at its limit of ${limitBytes} bytes for files without a size`,
      "READ_LIMIT_REACHED",
      {
        metadata: { path, limit_bytes: String(limitBytes) },
      },
    );
    this.name = "ReadLimitError";
    this.path = path;
    this.limitBytes = limitBytes;
  }
}

/**
 * Reads a file's bytes as they arrive, one chunk per daemon message, never holding more than the
 * chunk in hand. A regular file's read that breaks with its connection resumes on a new stream at
 * the offset after the last chunk handed over (with the sandbox's reconnect backoff), once the
 * daemon confirms the file has the size and modification time it had: otherwise
 * {@link FileChangedError}. A read the daemon stopped at its limit for files without a size ends
 * with {@link ReadLimitError} after the bytes before it. Leaving the loop cancels the call.
 */
export async function* readChunks(
  context: FilesContext,
  path: string,
  options: ReadRangeOptions = {},
  progress: ReadProgress = { offset: 0, resumes: 0 },
): AsyncGenerator<Uint8Array, void, undefined> {
  const start = checkedNumber(options.offset ?? 0, "offset");
  const end = options.length === undefined ? undefined : start + checkedNumber(options.length, "length");
  progress.offset = start;
  let failures = 0;
  for (;;) {
    const call = linkSignals(options.signal);
    const goAways = context.goAwayCount();
    let unsizedLimit: number | undefined;
    try {
      const remaining = end === undefined ? undefined : BigInt(Math.max(0, end - progress.offset));
      const stream = context
        .client()
        .read({ path, offset: BigInt(progress.offset), length: remaining }, { signal: call.signal });
      let ended = false;
      for await (const { event } of stream) {
        if (event.case === "stat") {
          const info = fileInfoFromProto(event.value);
          if (progress.stat === undefined) progress.stat = info;
          else if (
            info.size !== progress.stat.size ||
            info.modifiedTime.getTime() !== progress.stat.modifiedTime.getTime()
          )
            throw new FileChangedError(path);
        } else if (event.case === "chunk") {
          failures = 0;
          progress.offset = Number(event.value.offset) + event.value.data.length;
          yield event.value.data;
        } else if (event.case === "limitReached") {
          if (event.value.limit === ReadLimit.MAX_UNSIZED_READ_BYTES) unsizedLimit = Number(event.value.limitBytes);
        } else if (event.case === "end") {
          ended = true;
        }
      }
      if (!ended)
        throw new SandboxError(`the read of ${path} ended without its end event`, "NO_END", { metadata: { path } });
      if (unsizedLimit !== undefined) throw new ReadLimitError(path, unsizedLimit);
      return;
    } catch (error) {
      if (options.signal?.aborted) throw options.signal.reason;
      if (error instanceof SandboxError) throw error;
      const kind = classifyFailure(error, context.goAwayCount() > goAways);
      const settings = context.reconnect();
      // Only a regular file's bytes stay where they were: a device or a pipe cannot be read again from an offset.
      const resumable = progress.stat?.type === "file" && kind !== "fatal" && ++failures <= settings.maxAttempts;
      if (!resumable) throw context.fail(error);
      if (kind === "transient") await abortableDelay(backoffDelay(failures, Math.random, settings), options.signal);
      progress.resumes++;
    } finally {
      // Leaving a for-await does not cancel a connect-es stream: the call's own signal does.
      call.abort();
    }
  }
}

/** A non-negative safe integer option, or a SandboxError INVALID_ARGUMENT naming it. */
export function checkedNumber(value: unknown, name: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new SandboxError(`${name} must be a non-negative integer, not ${String(value)}`, "INVALID_ARGUMENT", {
      metadata: { field: name },
    });
  }
  return value;
}

/** Every chunk of a read joined into one array (the whole file in memory: for files that fit there). */
export async function collectBytes(chunks: AsyncIterable<Uint8Array>): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of chunks) {
    parts.push(chunk);
    total += chunk.length;
  }
  if (parts.length === 1) return parts[0];
  const joined = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    joined.set(part, at);
    at += part.length;
  }
  return joined;
}

/**
 * The chunks as a web ReadableStream (what E2B's `read(path, { format: "stream" })` returns): pulled
 * one chunk at a time (highWaterMark 0), so nothing is read ahead of the consumer; cancelling the
 * stream cancels the call.
 */
export function toReadableStream(chunks: AsyncGenerator<Uint8Array, void, undefined>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await chunks.next();
        if (next.done === true) controller.close();
        else controller.enqueue(next.value);
      },
      async cancel() {
        await chunks.return(undefined);
      },
    },
    { highWaterMark: 0 },
  );
}
