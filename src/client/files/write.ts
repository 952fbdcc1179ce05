import type { MessageInitShape } from "@bufbuild/protobuf";
import type { WriteRequestSchema } from "../../../gen/sandbox/v1/files_pb.js";
import { linkSignals } from "../../shared/abort.js";
import { SandboxError } from "../core/index.js";
import { type FileInfo, fileInfoFromProto } from "./file-info.js";
import type { FilesContext } from "./files-context.js";
import { checkedNumber } from "./read.js";

/**
 * WriteData is what `write()` takes: text (encoded as UTF-8), bytes (any ArrayBuffer view or an
 * ArrayBuffer), a Blob, a web ReadableStream of bytes, or any async or sync iterable of bytes or
 * text, such as a Node.js Readable (`fs.createReadStream(...)`). Streams and iterables are sent as
 * they are read, never gathered first.
 */
export type WriteData =
  | string
  | ArrayBuffer
  | ArrayBufferView
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>
  | Iterable<Uint8Array | string>;

/** Options of `write()`. */
export interface WriteOptions {
  /**
   * Permission bits of the file (`0o644`, or a string of octal digits such as `"755"`), applied
   * exactly (no umask). By default an existing file keeps its mode and a new one gets `0o644`.
   */
  mode?: number | string;
  /** Create missing parent directories (0755), as E2B's and Cloudflare's writes do. Default true. */
  createParents?: boolean;
  /**
   * Replace what exists at the path (default true); false makes an existing entry a
   * FileExistsError (ALREADY_EXISTS), checked atomically as the file is put in place.
   */
  overwrite?: boolean;
  /** The number of bytes the data must have; otherwise DATA_LOSS (CONTENT_MISMATCH) and nothing is written. */
  expectedSize?: number;
  /** The SHA-256 of the data, in hex; a different digest is DATA_LOSS (CONTENT_MISMATCH) and nothing is written. */
  expectedSha256?: string;
  /** Cancels the upload: nothing is left behind (the old file, if any, is intact); rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Called with the number of bytes sent so far, after each message (at most 1 MiB apart). */
  onProgress?: (bytesSent: number) => void;
}

/** Largest data message sent: the contract's best size, well under the daemon's 4 MiB message limit. */
const maxMessageBytes = 1024 * 1024;
/** Small pieces of a source are gathered into messages of at least this many bytes (the last one excepted). */
const minMessageBytes = 64 * 1024;

/**
 * Writes a file from `data`, streamed: a header, then the data in messages of 64 KiB to 1 MiB as
 * the source yields them, so memory holds one message at a time whatever the size. The daemon
 * writes to a temporary file renamed into place at the end; a cancelled or failed upload leaves
 * nothing. Never retried: a write that fails is reported, and repeating it is the caller's choice.
 * A source that throws fails the write with its own error.
 */
export async function writeFile(
  context: FilesContext,
  path: string,
  data: WriteData,
  options: WriteOptions = {},
): Promise<FileInfo> {
  const header = {
    path,
    mode: options.mode === undefined ? undefined : parseMode(options.mode),
    createParents: options.createParents ?? true,
    failIfExists: options.overwrite === false,
    expectedSizeBytes:
      options.expectedSize === undefined ? undefined : BigInt(checkedNumber(options.expectedSize, "expectedSize")),
    expectedSha256: options.expectedSha256 ?? "",
  };
  const source = byteSource(data)[Symbol.asyncIterator]();
  let sourceError: { error: unknown } | undefined;
  async function* requests(): AsyncGenerator<MessageInitShape<typeof WriteRequestSchema>> {
    yield { part: { case: "header", value: header } };
    const pieces = { [Symbol.asyncIterator]: () => source };
    let sent = 0;
    try {
      for await (const message of messages(pieces)) {
        yield { part: { case: "data", value: message } };
        sent += message.length;
        options.onProgress?.(sent);
      }
    } catch (error) {
      sourceError = { error };
      throw error;
    }
  }
  const call = linkSignals(options.signal);
  try {
    const response = await context.client().write(requests(), { signal: call.signal });
    return fileInfoFromProto(response.stat!);
  } catch (error) {
    if (options.signal?.aborted) throw options.signal.reason;
    if (sourceError !== undefined) throw sourceError.error;
    throw context.fail(error);
  } finally {
    call.abort();
    // Release the source (close a file, cancel a stream) without waiting: one parked in a read may never settle.
    try {
      void Promise.resolve(source.return?.()).catch(() => {});
    } catch {
      // A source whose return() throws has nothing more to release.
    }
  }
}

/** Permission bits from a number or a string of octal digits; SandboxError INVALID_ARGUMENT otherwise. */
export function parseMode(mode: number | string): number {
  const value =
    typeof mode === "string" && /^0?o?[0-7]{1,4}$/.test(mode) ? Number.parseInt(mode.replace(/^0?o/, ""), 8) : mode;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > 0o7777) {
    throw new SandboxError(
      `mode must be permission bits such as 0o644 or "644", not ${JSON.stringify(mode)}`,
      "INVALID_ARGUMENT",
      { metadata: { field: "mode" } },
    );
  }
  return value;
}

/** Any WriteData as an async iterable of byte arrays, read lazily. */
function byteSource(data: WriteData): AsyncIterable<Uint8Array> {
  if (typeof data === "string") return fromIterable([new TextEncoder().encode(data)]);
  if (data instanceof ArrayBuffer) return fromIterable([new Uint8Array(data)]);
  if (ArrayBuffer.isView(data)) return fromIterable([new Uint8Array(data.buffer, data.byteOffset, data.byteLength)]);
  if (typeof Blob !== "undefined" && data instanceof Blob)
    return encoded(data.stream() as unknown as AsyncIterable<Uint8Array>);
  if (typeof data === "object" && data !== null && (Symbol.asyncIterator in data || Symbol.iterator in data)) {
    return encoded(data as AsyncIterable<Uint8Array | string> | Iterable<Uint8Array | string>);
  }
  throw new SandboxError(
    `write() takes a string, bytes, a Blob, a stream or an iterable, not ${data === null ? "null" : typeof data}`,
    "INVALID_ARGUMENT",
  );
}

async function* fromIterable(chunks: Iterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  yield* chunks;
}

/** The pieces of a source as bytes: text encoded as UTF-8, anything else refused by name. */
async function* encoded(
  source: AsyncIterable<Uint8Array | string> | Iterable<Uint8Array | string>,
): AsyncGenerator<Uint8Array> {
  const encoder = new TextEncoder();
  for await (const piece of source) {
    if (typeof piece === "string") yield encoder.encode(piece);
    else if (piece instanceof Uint8Array) yield piece;
    else if (ArrayBuffer.isView(piece as unknown)) {
      const view = piece as unknown as ArrayBufferView;
      yield new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    } else
      throw new SandboxError(`write() sources must yield bytes or strings, not ${typeof piece}`, "INVALID_ARGUMENT");
  }
}

/**
 * The source's bytes in messages of at most 1 MiB, small pieces gathered until 64 KiB: a large
 * piece is cut without copying, small ones are joined (one copy, bounded by the message size).
 */
export async function* messages(source: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  const flush = () => {
    const message = pending.length === 1 ? pending[0] : join(pending, pendingBytes);
    pending = [];
    pendingBytes = 0;
    return message;
  };
  for await (const piece of source) {
    let rest = piece;
    while (rest.length > 0) {
      const take = Math.min(rest.length, maxMessageBytes - pendingBytes);
      pending.push(rest.subarray(0, take));
      pendingBytes += take;
      rest = rest.subarray(take);
      if (pendingBytes >= maxMessageBytes) yield flush();
    }
    if (pendingBytes >= minMessageBytes) yield flush();
    // A piece kept past the next read is copied: a source may reuse its buffer for the next piece.
    else if (pendingBytes > 0 && piece.length > 0) pending[pending.length - 1] = pending[pending.length - 1].slice();
  }
  if (pendingBytes > 0) yield flush();
}

function join(parts: readonly Uint8Array[], total: number): Uint8Array {
  const joined = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    joined.set(part, at);
    at += part.length;
  }
  return joined;
}
