/**
 * ChunkQueue is a bounded queue between one producer and one async-iterating consumer. `push`
 * enqueues at once and returns a promise that settles when the queue has room again, so a producer
 * that awaits it is held back by a slow consumer (backpressure) without ever losing an item.
 */
export class ChunkQueue<T> {
  private readonly items: T[] = [];
  private size = 0;
  private ended = false;
  private failure: unknown;
  private wakeConsumer?: () => void;
  private readonly roomWaiters: Array<() => void> = [];

  /** `capacity` is in units of `sizeOf` (items by default). */
  constructor(
    private readonly capacity: number,
    private readonly sizeOf: (item: T) => number = () => 1,
  ) {}

  /** Enqueues `item`; resolves once there is room again (at once when there is). */
  push(item: T): Promise<void> {
    if (this.ended) return Promise.resolve();
    this.items.push(item);
    this.size += this.sizeOf(item);
    this.wakeConsumer?.();
    if (this.size < this.capacity) return Promise.resolve();
    return new Promise<void>((resolve) => this.roomWaiters.push(resolve));
  }

  /** Ends the queue: the consumer gets what is queued, then the end (or `error`, thrown). */
  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = error;
    this.wakeConsumer?.();
    this.releaseProducers();
  }

  /** Iterates the items; leaving the loop early ends the queue and releases the producer. */
  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    try {
      for (;;) {
        const item = this.items.shift();
        if (item !== undefined) {
          this.size -= this.sizeOf(item);
          if (this.size < this.capacity) this.releaseProducers();
          yield item;
          continue;
        }
        if (this.ended) {
          if (this.failure !== undefined) throw this.failure;
          return;
        }
        await new Promise<void>((resolve) => (this.wakeConsumer = resolve));
        this.wakeConsumer = undefined;
      }
    } finally {
      this.ended = true;
      this.items.length = 0;
      this.releaseProducers();
    }
  }

  private releaseProducers(): void {
    for (const resolve of this.roomWaiters.splice(0)) resolve();
  }
}
