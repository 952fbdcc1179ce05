import { TextDecoder } from "node:util";
import { SandboxError } from "./errors.js";
import type { OutputChunk, OutputStreamName } from "./output.js";

/**
 * StreamDecoder turns the chunks of both output streams into text, with one incremental decoder
 * per stream, so a multi-byte character split across chunks (or across a reconnect) is never
 * broken. `encoding` is any WHATWG encoding label; default `"utf-8"` (`"utf8"` works too). The
 * text is what an incremental `TextDecoder` of that label gives; UTF-8 is decoded by V8 directly
 * (see {@link Utf8StreamDecoder}).
 */
export class StreamDecoder {
  private readonly decoders: Record<OutputStreamName, IncrementalDecoder>;

  constructor(readonly encoding = "utf-8") {
    this.decoders = { stdout: createDecoder(encoding), stderr: createDecoder(encoding) };
  }

  /** Decodes the next bytes of `stream`; may return "" while a character is incomplete. */
  decode(stream: OutputStreamName, data: Uint8Array): string {
    return this.decoders[stream].decode(data, { stream: true });
  }

  /**
   * Takes the next bytes of `stream` as {@link decode} does, but returns their text as a function
   * that decodes it when first called: what a character cut at the end carries to the next chunk is
   * settled now, so texts can be read in any order, or never (a reader of bytes only then builds no
   * string). UTF-8 only; other encodings are decoded now.
   */
  decodeLater(stream: OutputStreamName, data: Uint8Array): () => string {
    const decoder = this.decoders[stream];
    if (decoder instanceof Utf8StreamDecoder) return decoder.decodeLater(data);
    const text = decoder.decode(data, { stream: true });
    return () => text;
  }

  /** Flushes what is left of `stream` (an incomplete character becomes U+FFFD). */
  flush(stream: OutputStreamName): string {
    return this.decoders[stream].decode();
  }
}

/** What {@link StreamDecoder} needs of a decoder: TextDecoder's incremental `decode`. */
interface IncrementalDecoder {
  decode(data?: Uint8Array, options?: { stream?: boolean }): string;
}

/** The UTF-8 byte order mark. */
const byteOrderMark = [0xef, 0xbb, 0xbf] as const;

/** Creates a decoder; an unknown encoding label is a SandboxError with code INVALID_ARGUMENT. */
function createDecoder(encoding: string): IncrementalDecoder {
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(encoding);
  } catch (error) {
    throw new SandboxError(`unknown encoding: ${encoding}`, "INVALID_ARGUMENT", { cause: error });
  }
  return decoder.encoding === "utf-8" ? new Utf8StreamDecoder() : decoder;
}

/**
 * Utf8StreamDecoder decodes a stream of UTF-8 chunks exactly as an incremental `TextDecoder("utf-8")`
 * does (U+FFFD for each maximal invalid subpart, a leading byte order mark dropped), with V8's own
 * decoder (`Buffer#toString`): Node 20's TextDecoder goes through ICU, 3-4x slower, and builds a
 * 16-bit copy of the text first. A character cut at the end of a chunk is held back, at most
 * 3 bytes, until the next chunk completes it.
 */
class Utf8StreamDecoder implements IncrementalDecoder {
  private pending?: Buffer;
  private started = false;

  decode(data: Uint8Array = new Uint8Array(0), options: { stream?: boolean } = {}): string {
    if (options.stream) return this.decodeLater(data)();
    let bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    if (this.pending !== undefined) {
      bytes = Buffer.concat([this.pending, bytes]);
      this.pending = undefined;
    }
    const end = options.stream ? completeEnd(bytes) : bytes.length;
    if (end < bytes.length) this.pending = Buffer.from(bytes.subarray(end));
    let text = bytes.toString("utf8", 0, end);
    if (!this.started && text.length > 0) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (!options.stream) this.started = false;
    return text;
  }

  /**
   * Takes the next chunk of a stream: the incomplete character at its end is held back for the next
   * one and the byte order mark of the stream's first text dropped, now; the text is built when the
   * returned function is first called (see StreamDecoder.decodeLater).
   */
  decodeLater(data: Uint8Array): () => string {
    let bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    if (this.pending !== undefined) {
      bytes = Buffer.concat([this.pending, bytes]);
      this.pending = undefined;
    }
    const end = completeEnd(bytes);
    if (end < bytes.length) this.pending = Buffer.from(bytes.subarray(end));
    let start = 0;
    // Any bytes decode to at least one character (U+FFFD for invalid ones): the stream's first text
    // starts here, and a byte order mark can only be its first character.
    if (!this.started && end > 0) {
      this.started = true;
      if (end >= 3 && byteOrderMark.every((byte, index) => bytes[index] === byte)) start = 3;
    }
    let text: string | undefined;
    return () => (text ??= bytes.toString("utf8", start, end));
  }
}

/**
 * Where the bytes that can still become one character end: before a valid but incomplete UTF-8
 * sequence at the end of `bytes` (held back for the next chunk), else at the end. Anything else
 * at the end (a complete character, or bytes no continuation can make valid) decodes now, as
 * TextDecoder decodes it.
 */
function completeEnd(bytes: Uint8Array): number {
  const length = bytes.length;
  for (let start = length - 1; start >= 0 && start >= length - 3; start--) {
    const lead = bytes[start]!;
    if (lead >= 0x80 && lead < 0xc0) continue; // a continuation byte: look further back
    const need =
      lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 1;
    if (need <= length - start) return length;
    // The bytes after the lead must be valid continuations for it (the second byte's range depends on the lead).
    for (let index = start + 1; index < length; index++) {
      const byte = bytes[index]!;
      const [low, high] = index > start + 1 ? [0x80, 0xbf] : secondByteRange(lead);
      if (byte < low || byte > high) return length;
    }
    return start;
  }
  return length;
}

/** The range of the byte after a UTF-8 lead byte (the Unicode Standard's table 3-7). */
function secondByteRange(lead: number): [number, number] {
  if (lead === 0xe0) return [0xa0, 0xbf];
  if (lead === 0xed) return [0x80, 0x9f];
  if (lead === 0xf0) return [0x90, 0xbf];
  if (lead === 0xf4) return [0x80, 0x8f];
  return [0x80, 0xbf];
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
