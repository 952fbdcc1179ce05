import type { OutputChunk, OutputOffsets } from "./output.js";

/**
 * RetainedOutput is the output a handle keeps for its `result`: the chunks in arrival order,
 * at most `limitBytes` of data. Beyond the limit the oldest chunks are dropped (a log's tail is what
 * tells how it ended, and the daemon drops the same way), and `droppedBytes` counts them per stream.
 */
export class RetainedOutput {
  private chunks: OutputChunk[];
  /** Index in `chunks` of the first chunk still retained; dropped ones are spliced off in batches. */
  private head = 0;
  private bytes = 0;
  /** How many leading chunks were carried over from an earlier handle (minus those dropped since). */
  private carriedCount: number;
  private readonly dropped: OutputOffsets;

  /** `limitBytes` of data at most (Infinity keeps everything); `carried` continues an earlier handle's output. */
  constructor(
    readonly limitBytes: number,
    carried?: RetainedOutput,
  ) {
    this.chunks = carried?.retained() ?? [];
    this.carriedCount = this.chunks.length;
    this.dropped = { ...(carried?.dropped ?? { stdout: 0, stderr: 0 }) };
    for (const chunk of this.chunks) this.bytes += chunk.data.length;
    this.trim();
  }

  /** Bytes dropped from the front of each stream so far (0, 0 when nothing was dropped). */
  get droppedBytes(): OutputOffsets {
    return { ...this.dropped };
  }

  /** Appends a chunk, dropping the oldest ones while more than the limit is retained. */
  push(chunk: OutputChunk): void {
    this.chunks.push(chunk);
    this.bytes += chunk.data.length;
    this.trim();
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
      const chunk = this.chunks[this.head++];
      this.bytes -= chunk.data.length;
      this.dropped[chunk.stream] += chunk.data.length;
      if (this.carriedCount > 0) this.carriedCount--;
    }
    // Splice in batches so dropping stays linear over a long-running follow.
    if (this.head > 1024 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
  }
}
