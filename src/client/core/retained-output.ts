import type { OutputChunk, OutputGap, OutputOffsets, OutputStreamName } from "./output.js";

/**
 * RetainedOutput is the output a handle keeps for its `result`: the chunks in arrival order,
 * at most `limitBytes` of data. Beyond the limit the oldest bytes are dropped, whole chunks and then the
 * front of the oldest kept one (a log's tail is what tells how it ended, and the daemon drops the same
 * way), and `droppedBytes` counts them per stream.
 */
export class RetainedOutput {
  private chunks: OutputChunk[];
  /** Index in `chunks` of the first chunk still retained; dropped ones are spliced off in batches. */
  private head = 0;
  private bytes = 0;
  /** How many leading chunks were carried over from an earlier handle (minus those dropped since). */
  private carriedCount: number;
  /** The byte ranges dropped, per stream: [start, end) pairs in order, adjacent ones merged. */
  private readonly dropped: Record<OutputStreamName, Array<[number, number]>>;

  /**
   * `limitBytes` of data at most (Infinity keeps everything); `carried` continues an earlier handle's
   * output, of which only the bytes below `upTo` are kept (the new handle receives the rest again).
   */
  constructor(
    readonly limitBytes: number,
    carried?: RetainedOutput,
    upTo?: OutputOffsets,
  ) {
    this.chunks = (carried?.retained() ?? []).flatMap((chunk) => below(chunk, upTo));
    this.carriedCount = this.chunks.length;
    this.dropped = {
      stdout: clip(carried?.dropped.stdout, upTo?.stdout),
      stderr: clip(carried?.dropped.stderr, upTo?.stderr),
    };
    for (const chunk of this.chunks) this.bytes += chunk.data.length;
    this.trim();
  }

  /** Bytes dropped from the front of each stream so far (0, 0 when nothing was dropped). */
  get droppedBytes(): OutputOffsets {
    const total = (ranges: Array<[number, number]>) => ranges.reduce((sum, [start, end]) => sum + end - start, 0);
    return { stdout: total(this.dropped.stdout), stderr: total(this.dropped.stderr) };
  }

  /** The ranges dropped, stdout's first, each where it starts and how long it is. */
  get gaps(): OutputGap[] {
    return (["stdout", "stderr"] as const).flatMap((stream) =>
      this.dropped[stream].map(([start, end]) => ({ stream, offset: start, missedBytes: end - start })),
    );
  }

  /** Appends a chunk, dropping the oldest ones while more than the limit is retained. */
  push(chunk: OutputChunk): void {
    this.chunks.push(chunk);
    this.bytes += chunk.data.length;
    this.trim();
  }

  /**
   * Holds `views` instead of the retained chunks: the same chunks (stream, offset, bytes), one for
   * one in the same order, whose bytes live elsewhere (a result's joined output), so the buffers the
   * chunks arrived in can go.
   */
  shareWith(views: readonly OutputChunk[]): void {
    if (views.length !== this.chunks.length - this.head) throw new Error("views must match the retained chunks");
    this.chunks = [...views];
    this.head = 0;
  }

  /** The retained chunks, in arrival order. */
  retained(): OutputChunk[] {
    return this.chunks.slice(this.head);
  }

  /** The retained chunks this handle received itself (not carried over from an earlier handle). */
  received(): OutputChunk[] {
    return this.chunks.slice(this.head + this.carriedCount);
  }

  private trim(): void {
    while (this.bytes > this.limitBytes && this.head < this.chunks.length) {
      const chunk = this.chunks[this.head];
      const excess = this.bytes - this.limitBytes;
      let end = chunk.offset + chunk.data.length;
      if (excess < chunk.data.length) {
        // Only the chunk's front must go (messages reach 1 MiB, more than a small limit): keep a copy
        // of its tail, so the rest of the message's buffer can go.
        end = chunk.offset + excess;
        this.chunks[this.head] = { ...chunk, offset: end, data: Buffer.from(chunk.data.subarray(excess)) };
        this.bytes -= excess;
      } else {
        // The slot stays until the batch splice below; the chunk's bytes must not (a 1 MiB message each).
        this.chunks[this.head++] = droppedChunk;
        this.bytes -= chunk.data.length;
        if (this.carriedCount > 0) this.carriedCount--;
      }
      const ranges = this.dropped[chunk.stream];
      const last = ranges.at(-1);
      if (last !== undefined && last[1] === chunk.offset) last[1] = end;
      else ranges.push([chunk.offset, end]);
    }
    // Splice in batches so dropping stays linear over a long-running follow.
    if (this.head > 1024 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
  }
}

/** What a dropped chunk's slot holds until it is spliced off. */
const droppedChunk: OutputChunk = { stream: "stdout", offset: 0, data: Buffer.alloc(0) };

/** The part of `chunk` below `upTo` (all of it without a bound), as a list of zero or one chunk. */
function below(chunk: OutputChunk, upTo: OutputOffsets | undefined): OutputChunk[] {
  if (upTo === undefined) return [chunk];
  const keep = upTo[chunk.stream] - chunk.offset;
  if (keep <= 0) return [];
  return keep >= chunk.data.length ? [chunk] : [{ ...chunk, data: chunk.data.subarray(0, keep) }];
}

/** Copies dropped `ranges`, only what lies below `upTo` (all of them without a bound). */
function clip(ranges: ReadonlyArray<[number, number]> = [], upTo = Infinity): Array<[number, number]> {
  return ranges.filter(([start]) => start < upTo).map(([start, end]) => [start, Math.min(end, upTo)]);
}
