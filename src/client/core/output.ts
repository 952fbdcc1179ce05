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
