import { ChunkQueue } from "./chunk-queue.js";

/**
 * FanOut hands every item a producer publishes to each of its subscribers, in order, each through
 * a bounded {@link ChunkQueue}: `publish` resolves once every subscriber has room again, so the
 * slowest iterator holds the producer back (backpressure) and none loses an item. A subscriber that
 * leaves its loop early is let go at once. Once ended, new subscribers get only what they are
 * given to replay, then the end.
 */
export class FanOut<T> {
  private readonly queues = new Set<ChunkQueue<T>>();
  private end?: { error?: unknown };

  /** Each subscriber queues at most `capacity` units of `sizeOf` before holding the producer back. */
  constructor(
    private readonly capacity: number,
    private readonly sizeOf: (item: T) => number,
  ) {}

  /** Hands `item` to every subscriber; resolves once each has room again. */
  publish(item: T): Promise<void> {
    return Promise.all([...this.queues].map((queue) => queue.push(item))).then(() => {});
  }

  /** Ends every subscriber after what it has queued, with `error` thrown when given. Idempotent. */
  close(error?: unknown): void {
    if (this.end !== undefined) return;
    this.end = { error };
    for (const queue of this.queues) queue.end(error);
  }

  /**
   * Yields `replay` first, then every item published from now on, until the end. Subscribing
   * happens when this is called, so an item published between taking `replay` and iterating is
   * neither missed nor doubled.
   */
  subscribe(replay: readonly T[]): AsyncGenerator<T> {
    if (this.end !== undefined) return replayThenEnd(replay, this.end.error);
    const queue = new ChunkQueue<T>(this.capacity, this.sizeOf);
    this.queues.add(queue);
    return this.drain(queue, replay);
  }

  private async *drain(queue: ChunkQueue<T>, replay: readonly T[]): AsyncGenerator<T> {
    try {
      yield* replay;
      yield* queue;
    } finally {
      this.queues.delete(queue);
      // A consumer that leaves while still replaying never ran the queue's own iterator: a publish
      // waiting for its room must be released, or the producer would wait forever.
      queue.end();
    }
  }
}

async function* replayThenEnd<T>(replay: readonly T[], error: unknown): AsyncGenerator<T> {
  yield* replay;
  if (error !== undefined) throw error;
}
