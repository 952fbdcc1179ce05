import { TextDecoder } from "node:util";
import { SandboxError } from "./errors.js";

/** Name of one of a process's output streams. A PTY process writes everything to stdout. */
export type OutputStreamName = "stdout" | "stderr";

/** OutputChunk is a run of bytes one output stream delivered, exactly as the process wrote them. */
export interface OutputChunk {
  /** Which stream the bytes came from. */
  readonly stream: OutputStreamName;
  /**
   * The bytes, exactly as written. A Node Buffer (a Uint8Array), so `String(chunk.data)` and
   * `${chunk.data}` give its text (UTF-8 of this chunk alone; a handle's `logs()` and `onOutput`
   * decode across chunks, as execStream's `data` does).
   */
  readonly data: Buffer;
  /** Byte offset of `data`'s first byte within its stream (stdout and stderr count separately). */
  readonly offset: number;
}

/**
 * OutputGap is output that was dropped: `missedBytes` bytes of `stream` from byte `offset` on. The
 * daemon keeps the first bytes of each stream and the last, so a stream has at most one gap.
 */
export interface OutputGap {
  /** The stream that lost bytes. */
  readonly stream: OutputStreamName;
  /** Offset of the first byte dropped. */
  readonly offset: number;
  /** How many bytes were dropped; the next kept byte is at `offset + missedBytes`. */
  readonly missedBytes: number;
}

/** Byte offsets into both output streams: where the next byte wanted starts. */
export interface OutputOffsets {
  /** Next stdout byte offset. */
  stdout: number;
  /** Next stderr byte offset. */
  stderr: number;
}

/**
 * StreamDecoder turns the chunks of both output streams into text, with one incremental
 * `TextDecoder` per stream, so a multi-byte character split across chunks (or across a reconnect)
 * is never broken. `encoding` is any WHATWG encoding label; default `"utf-8"` (`"utf8"` works too).
 */
export class StreamDecoder {
  private readonly decoders: Record<OutputStreamName, TextDecoder>;

  constructor(readonly encoding = "utf-8") {
    this.decoders = { stdout: createDecoder(encoding), stderr: createDecoder(encoding) };
  }

  /** Decodes the next bytes of `stream`; may return "" while a character is incomplete. */
  decode(stream: OutputStreamName, data: Uint8Array): string {
    return this.decoders[stream].decode(data, { stream: true });
  }

  /** Flushes what is left of `stream` (an incomplete character becomes U+FFFD). */
  flush(stream: OutputStreamName): string {
    return this.decoders[stream].decode();
  }
}

/** Creates a TextDecoder; an unknown encoding label is a SandboxError with code INVALID_ARGUMENT. */
function createDecoder(encoding: string): TextDecoder {
  try {
    return new TextDecoder(encoding);
  } catch (error) {
    throw new SandboxError(`unknown encoding: ${encoding}`, "INVALID_ARGUMENT", { cause: error });
  }
}

/**
 * DecodedOutput is the text of a run of chunks: each stream on its own and both joined in arrival
 * order, decoded once with a {@link StreamDecoder}.
 */
export interface DecodedOutput {
  /** Standard output text. */
  stdout: string;
  /** Standard error text. */
  stderr: string;
  /** Both streams joined in the order their chunks arrived. */
  output: string;
}

/** Decodes chunks (in arrival order) into {@link DecodedOutput}. */
export function decodeChunks(chunks: readonly OutputChunk[], encoding = "utf-8"): DecodedOutput {
  const decoder = new StreamDecoder(encoding);
  const parts: Record<OutputStreamName, string[]> = { stdout: [], stderr: [] };
  const joined: string[] = [];
  for (const chunk of chunks) {
    const text = decoder.decode(chunk.stream, chunk.data);
    parts[chunk.stream].push(text);
    joined.push(text);
  }
  for (const stream of ["stdout", "stderr"] as const) {
    const rest = decoder.flush(stream);
    parts[stream].push(rest);
    joined.push(rest);
  }
  return { stdout: parts.stdout.join(""), stderr: parts.stderr.join(""), output: joined.join("") };
}

/** Concatenates the bytes of one stream's chunks. */
export function joinBytes(chunks: readonly OutputChunk[], stream: OutputStreamName): Uint8Array {
  let length = 0;
  for (const chunk of chunks) if (chunk.stream === stream) length += chunk.data.length;
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    if (chunk.stream !== stream) continue;
    bytes.set(chunk.data, at);
    at += chunk.data.length;
  }
  return bytes;
}
