import { raceSignal } from "../../shared/abort.js";
import { OutputLostError } from "./errors.js";
import { FanOut } from "./fan-out.js";
import type { OutputChunk, OutputOffsets, OutputStreamName } from "./output.js";
import { StreamDecoder } from "./stream-decoder.js";
import { RetainedOutput } from "./retained-output.js";

/** Options of a {@link CommandOutput}. */
export interface CommandOutputOptions {
  /** Offsets of the first bytes wanted; 0, 0 by default. */
  from?: OutputOffsets;
  /** Output an earlier handle of the same command kept, continued here (what it kept below `from`). */
  carried?: RetainedOutput;
  /** Most bytes kept for the result (see RetainedOutput). */
  limitBytes: number;
  /** Encoding of `onOutput`'s text. */
  encoding?: string;
  /** Called with text as it arrives, each stream decoded incrementally. */
  onOutput?: (stream: OutputStreamName, data: string) => void;
}

/** Queue capacity of one iterator, in bytes: beyond it the stream is held back (backpressure). */
const iteratorCapacityBytes = 4 * 1024 * 1024;

/**
 * CommandOutput is what a handle does with the bytes it receives: it keeps the offsets its own
 * stream resumes from, skips bytes below them (so none is duplicated), turns a hole into an
 * {@link OutputLostError}, and hands each new chunk to the kept result ({@link RetainedOutput}),
 * to every iterator ({@link FanOut}, with backpressure) and to `onOutput` as text.
 *
 * It also knows where the handle's user is ({@link resumeOffsets}): after the last chunk an
 * iterator was handed. The stream goes on receiving while nobody iterates (for `result`), so what
 * was received can be ahead of what the user saw; a reconnect() starts where the user is.
 */
export class CommandOutput {
  private readonly next: OutputOffsets;
  /** Offsets after the last chunk handed to an iterator; undefined until one was. */
  private seen?: OutputOffsets;
  private readonly kept: RetainedOutput;
  private readonly fanOut = new FanOut<OutputChunk>(iteratorCapacityBytes, (chunk) => chunk.data.length);
  private readonly decoder?: StreamDecoder;

  /** Creates the output of a handle. */
  constructor(private readonly options: CommandOutputOptions) {
    this.next = { ...(options.from ?? { stdout: 0, stderr: 0 }) };
    this.kept = new RetainedOutput(options.limitBytes, options.carried, options.from);
    if (options.onOutput !== undefined) this.decoder = new StreamDecoder(options.encoding);
  }

  /** Offsets after the last byte received, per stream: where this handle's own stream resumes. */
  get offsets(): OutputOffsets {
    return { ...this.next };
  }

  /**
   * Where the user is: offsets after the last chunk an iterator was handed (or a loss it was told
   * of), or, while no iterator was handed anything, after the last byte received.
   */
  get resumeOffsets(): OutputOffsets {
    return { ...(this.seen ?? this.next) };
  }

  /** What is kept for the result, for a handle that continues this one. */
  get retained(): RetainedOutput {
    return this.kept;
  }

  /** Yields what this handle kept of its own output, then every chunk from now on, until {@link close}. */
  subscribe(): AsyncGenerator<OutputChunk> {
    // Taking the replay and subscribing happen in one step, so no chunk is missed or doubled.
    return this.handOut(this.fanOut.subscribe(this.kept.received()));
  }

  /**
   * Takes a chunk the daemon sent: bytes already received are skipped, a hole before it is an
   * OutputLostError (the offset moves past it). Resolves once every iterator has room again, or
   * rejects when `signal` aborts first.
   */
  async deliver(received: OutputChunk, signal: AbortSignal): Promise<void> {
    const expected = this.next[received.stream];
    const end = received.offset + received.data.length;
    if (end <= expected) return;
    if (received.offset > expected) this.lost(received.stream, expected, received.offset);
    const chunk: OutputChunk =
      received.offset === expected
        ? received
        : { stream: received.stream, offset: expected, data: received.data.subarray(expected - received.offset) };
    this.next[chunk.stream] = end;
    this.kept.push(chunk);
    const room = this.fanOut.publish(chunk);
    if (this.decoder !== undefined) {
      const text = this.decoder.decode(chunk.stream, chunk.data);
      if (text !== "") this.options.onOutput?.(chunk.stream, text);
    }
    await raceSignal(room, signal);
  }

  /** Takes a gap the daemon reported: output it no longer had. Throws OutputLostError when any of it was wanted. */
  gap(stream: OutputStreamName, offset: number, missedBytes: number): void {
    const end = offset + missedBytes;
    const from = Math.max(offset, this.next[stream]);
    if (end > from) this.lost(stream, from, end);
  }

  /** Ends `onOutput`'s text (an incomplete character becomes U+FFFD). */
  flushText(): void {
    if (this.decoder === undefined) return;
    for (const stream of ["stdout", "stderr"] as const) {
      const text = this.decoder.flush(stream);
      if (text !== "") this.options.onOutput?.(stream, text);
    }
  }

  /** Ends every iterator after what it has queued, with `error` thrown when given. */
  close(error?: unknown): void {
    this.fanOut.close(error);
  }

  /** Yields `chunks`, moving {@link resumeOffsets} past each one as it is handed over. */
  private async *handOut(chunks: AsyncGenerator<OutputChunk>): AsyncGenerator<OutputChunk> {
    try {
      for await (const chunk of chunks) {
        this.saw(chunk.stream, chunk.offset + chunk.data.length);
        yield chunk;
      }
    } catch (error) {
      // The user was told of the hole: where they are is past it.
      if (error instanceof OutputLostError) this.saw(error.stream, error.offset + error.missedBytes);
      throw error;
    }
  }

  private saw(stream: OutputStreamName, end: number): void {
    this.seen ??= { ...(this.options.from ?? { stdout: 0, stderr: 0 }) };
    if (end > this.seen[stream]) this.seen[stream] = end;
  }

  /** Moves the offset past lost bytes (so reconnect() continues after them) and says so. */
  private lost(stream: OutputStreamName, from: number, end: number): never {
    this.next[stream] = end;
    throw new OutputLostError(stream, from, end - from);
  }
}
