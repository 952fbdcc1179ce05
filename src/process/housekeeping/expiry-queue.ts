/** The longest delay setTimeout takes. */
const maxTimerMs = 2 ** 31 - 1;

/**
 * Expires entries a fixed time after each was added, in the order added, with one timer for all of
 * them: the records that linger after their exit. A timer per record cost each about 250 bytes (the
 * Timeout, its closure and context) for the whole linger time. An entry is a key and a sequence
 * number, never the record itself, so a record removed early is not kept alive until its expiry;
 * `expire` gets both and decides whether the entry still names a record.
 */
export class ExpiryQueue {
  private keys: string[] = [];
  private sequences: number[] = [];
  private dueAt: number[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly delayMs: number,
    private readonly expire: (key: string, sequence: number) => void,
  ) {}

  /** Entries not yet expired. */
  get size(): number {
    return this.keys.length - this.head;
  }

  /** Adds an entry that expires `delayMs` from now. */
  add(key: string, sequence: number): void {
    this.keys.push(key);
    this.sequences.push(sequence);
    this.dueAt.push(performance.now() + this.delayMs);
    if (this.timer === undefined) this.arm(this.delayMs);
  }

  /** Drops every entry without expiring it, and the timer. */
  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.keys = [];
    this.sequences = [];
    this.dueAt = [];
    this.head = 0;
  }

  private arm(delayMs: number): void {
    // setTimeout takes at most 2^31 - 1 ms (it fires at once past that); run() re-arms for the rest.
    this.timer = setTimeout(() => this.run(), Math.min(Math.max(0, delayMs), maxTimerMs));
    this.timer.unref();
  }

  private run(): void {
    this.timer = undefined;
    const now = performance.now();
    while (this.head < this.keys.length && this.dueAt[this.head]! <= now) {
      const key = this.keys[this.head]!;
      const sequence = this.sequences[this.head]!;
      this.head++;
      this.expire(key, sequence);
    }
    // Expired entries stay at the front until they are half of the arrays: one copy per half.
    if (this.head === this.keys.length) {
      this.clear();
      return;
    }
    if (this.head > 1024 && this.head * 2 > this.keys.length) {
      this.keys = this.keys.slice(this.head);
      this.sequences = this.sequences.slice(this.head);
      this.dueAt = this.dueAt.slice(this.head);
      this.head = 0;
    }
    this.arm(this.dueAt[this.head]! - now);
  }
}
