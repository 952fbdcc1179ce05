import { raceSignal } from "../../shared/abort.js";

/** One of a process's two output streams. */
export type OutputStreamName = "stdout" | "stderr";

/** A run of bytes from one stream, at an absolute byte offset within that stream. */
export interface OutputChunk {
  readonly kind: "chunk";
  readonly stream: OutputStreamName;
  /** Offset of `data`'s first byte within `stream`. */
  readonly offset: number;
  readonly data: Uint8Array;
}

/**
 * Output a reader asked for that was dropped to keep memory bounded: `missedBytes` bytes of
 * `stream` from `offset` on. The next chunk of that stream starts at `offset + missedBytes`.
 */
export interface OutputGap {
  readonly kind: "gap";
  readonly stream: OutputStreamName;
  readonly offset: number;
  readonly missedBytes: number;
}

/** What a reader of an {@link OutputBuffer} receives. */
export type OutputItem = OutputChunk | OutputGap;

/** Byte offsets per stream: where a reader is, or how much was written. */
export interface StreamOffsets {
  stdout: number;
  stderr: number;
}

/** Options for {@link OutputBuffer}. */
export interface OutputBufferOptions {
  /**
   * Bytes retained (both streams together) before the oldest output is dropped. A pinned
   * reader (see {@link OutputBuffer.createReader}) turns dropping into backpressure instead.
   */
  capacityBytes: number;
  /**
   * Called with `true` when a pinned reader has `capacityBytes` unread and the producer should
   * pause, and with `false` when it has caught up to half of that and the producer may resume.
   */
  onBackpressure?: (paused: boolean) => void;
  /**
   * A budget shared with other buffers (the daemon's, see `MemoryBudget`): the retained bytes are
   * charged to it as they change, it may {@link OutputBuffer.trimTo} this buffer to make room, and
   * while it is exhausted a pinned reader's producer pauses once its share of the budget is unread
   * (see {@link SharedByteBudget.pinnedShareBytes}) rather than the capacity. Default: none.
   */
  budget?: SharedByteBudget;
}

/** What an {@link OutputBuffer} needs of a budget it shares with others (implemented by `MemoryBudget`). */
export interface SharedByteBudget {
  /** Counts `deltaBytes` more held (negative: released). May trim this buffer before it returns. */
  charge(deltaBytes: number): void;
  /** Whether more than the limit is held, after dropping what could be dropped. */
  readonly exhausted: boolean;
  /** Resolves at the next release of bytes by any holder. */
  nextRelease(): Promise<void>;
  /** Counts a pinned reader in (1) or out (-1), for {@link pinnedShareBytes}. */
  countPinned(delta: 1 | -1): void;
  /** What each pinned reader's unread output may hold while the budget is exhausted. */
  readonly pinnedShareBytes: number;
}

interface StoredChunk {
  stream: OutputStreamName;
  offset: number;
  data: Uint8Array;
}

/** Chunks smaller than this are merged with the next write of the same stream. */
const coalesceBelowBytes = 4096;
/** Merged chunks stay below this size. */
const maxChunkBytes = 64 * 1024;
/** Bookkeeping cost charged per stored chunk, so many tiny writes stay bounded too. */
const chunkOverheadBytes = 64;
/** What a dropped chunk holds until its slot is compacted away. */
const droppedData = new Uint8Array(0);

/**
 * OutputBuffer retains a process's output, both streams interleaved in arrival order, with
 * absolute per-stream byte offsets and a bound on memory.
 *
 * When the retained bytes exceed the capacity, the oldest chunks are dropped; a reader that asks
 * for dropped output gets an {@link OutputGap} saying exactly how much it missed. Readers pull at
 * their own pace, so a stalled reader never slows the producer or other readers. A pinned reader
 * (the caller of Exec) is the exception: its unread output is never dropped, and the producer is
 * asked to pause instead.
 *
 * With a shared budget, the retained bytes count against it too: the budget's owner may trim the
 * buffer below its capacity (readers get a gap, as for any dropped output), and a pinned reader's
 * producer pauses early while the budget is exhausted.
 */
export class OutputBuffer {
  private readonly capacityBytes: number;
  private onBackpressure?: (paused: boolean) => void;
  /** Retained chunks from index `head` on; the entries before it were dropped and await compaction. */
  private chunks: StoredChunk[] = [];
  private head = 0;
  /** Sequence number of `chunks[head]`; sequence numbers never repeat. */
  private headSequence = 0;
  private retained = 0;
  private readonly written: StreamOffsets = { stdout: 0, stderr: 0 };
  private readonly firstRetained: StreamOffsets = { stdout: 0, stderr: 0 };
  private ended = false;
  private changed?: { promise: Promise<void>; resolve: () => void };
  private pinned?: OutputReader;
  private paused = false;
  private budget?: SharedByteBudget;
  /** The retained bytes last charged to {@link budget}. */
  private charged = 0;
  /** A paused producer waits for the budget to release bytes. */
  private waitingForBudget = false;

  /** Creates an empty buffer. */
  constructor(options: OutputBufferOptions) {
    this.capacityBytes = Math.max(1, options.capacityBytes);
    this.onBackpressure = options.onBackpressure;
    this.budget = options.budget;
  }

  /** Total bytes written per stream: the offset the next byte of each will have. */
  get offsets(): Readonly<StreamOffsets> {
    return this.written;
  }

  /** Offset of the first byte still retained, per stream. */
  get retainedFrom(): Readonly<StreamOffsets> {
    return this.firstRetained;
  }

  /** Bytes retained now, both streams, with the bookkeeping charged per chunk. */
  get retainedBytes(): number {
    return this.retained;
  }

  /**
   * Drops every retained byte a pinned reader has read (all of them without one), oldest first,
   * as if the capacity were 0: readers that ask for them get an {@link OutputGap}. Returns the
   * bytes released. Used to keep the output of all processes together within a budget.
   */
  discardRetained(): number {
    const before = this.retained;
    this.dropOldest(0, true);
    this.chargeBudget();
    return before - this.retained;
  }

  /**
   * Drops the oldest output until at most `bytes` are retained, as the capacity does: what a pinned
   * reader has not read and the newest chunk stay. Readers that ask for what was dropped get an
   * {@link OutputGap}. Returns the bytes released. Used by a shared budget to make room.
   */
  trimTo(bytes: number): number {
    const before = this.retained;
    this.dropOldest(Math.max(0, bytes));
    this.chargeBudget();
    return before - this.retained;
  }

  /**
   * Lets go of the shared budget: what no pinned reader needs is dropped, and the rest is no longer
   * charged to it. Used when the record goes. Returns the bytes released.
   */
  leaveBudget(): number {
    const released = this.discardRetained();
    if (this.pinned !== undefined) this.budget?.countPinned(-1);
    this.budget?.charge(-this.charged);
    this.charged = 0;
    this.budget = undefined;
    return released;
  }

  /** Whether {@link end} was called: no more output will come. */
  get isEnded(): boolean {
    return this.ended;
  }

  /** Appends bytes read from `stream`. Empty data is ignored; appending after {@link end} throws. */
  append(stream: OutputStreamName, data: Uint8Array): void {
    if (this.ended) throw new Error("output buffer already ended");
    if (data.length === 0) return;
    // Only a retained chunk may grow: a dropped one (after discardRetained) keeps its empty slot.
    const last = this.chunks.length > this.head ? this.chunks[this.chunks.length - 1] : undefined;
    if (
      last !== undefined &&
      last.stream === stream &&
      last.data.length < coalesceBelowBytes &&
      last.data.length + data.length <= maxChunkBytes
    ) {
      last.data = Buffer.concat([last.data, data]);
      this.retained += data.length;
    } else {
      this.chunks.push({ stream, offset: this.written[stream], data });
      this.retained += data.length + chunkOverheadBytes;
    }
    this.written[stream] += data.length;
    this.dropOldest();
    this.chargeBudget();
    this.updateBackpressure();
    this.notify();
  }

  /** Marks the end of output; waiting readers wake and finish. Idempotent. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    // No producer is left to pause or resume; a record that lingers keeps no closure over its child.
    this.onBackpressure = undefined;
    this.notify();
  }

  /**
   * Creates a reader starting at the given offsets (0 for everything retained). A `pinned` reader
   * is never dropped from under: at most one may exist, and it holds the producer back instead.
   */
  createReader(from: Partial<StreamOffsets> = {}, options: { pinned?: boolean } = {}): OutputReader {
    const reader = new OutputReader(this, { stdout: from.stdout ?? 0, stderr: from.stderr ?? 0 });
    if (options.pinned) {
      if (this.pinned !== undefined) throw new Error("output buffer already has a pinned reader");
      this.pinned = reader;
      this.budget?.countPinned(1);
    }
    return reader;
  }

  /** Releases a pinned reader, letting the producer run free again. */
  unpin(reader: OutputReader): void {
    if (this.pinned !== reader) return;
    this.pinned = undefined;
    this.budget?.countPinned(-1);
    this.updateBackpressure();
    this.dropOldest();
    this.chargeBudget();
  }

  /** Copies the retained output of one stream. */
  snapshot(stream: OutputStreamName): Uint8Array {
    const parts: Uint8Array[] = [];
    for (let index = this.head; index < this.chunks.length; index++) {
      const chunk = this.chunks[index];
      if (chunk.stream === stream) parts.push(chunk.data);
    }
    return Buffer.concat(parts);
  }

  /**
   * Reads up to `maxItems` items and `maxBytes` bytes of output for a reader at `position`,
   * advancing it (a chunk past `maxBytes` is cut, its rest read next time). Returns an empty array
   * when the reader has everything written so far.
   * @internal
   */
  readAt(position: ReaderPosition, maxItems: number, maxBytes = Number.POSITIVE_INFINITY): OutputItem[] {
    const items: OutputItem[] = [];
    for (const stream of ["stdout", "stderr"] as const) {
      const from = position.offsets[stream];
      if (from < this.firstRetained[stream]) {
        items.push({ kind: "gap", stream, offset: from, missedBytes: this.firstRetained[stream] - from });
        position.offsets[stream] = this.firstRetained[stream];
      }
    }
    let bytes = 0;
    let index = this.head + Math.max(0, position.sequence - this.headSequence);
    for (; index < this.chunks.length && items.length < maxItems && bytes < maxBytes; index++) {
      const chunk = this.chunks[index];
      const from = position.offsets[chunk.stream];
      const end = chunk.offset + chunk.data.length;
      if (end <= from) continue;
      const skip = Math.max(0, from - chunk.offset);
      const take = Math.min(chunk.data.length - skip, maxBytes - bytes);
      const data = skip === 0 && take === chunk.data.length ? chunk.data : chunk.data.subarray(skip, skip + take);
      items.push({ kind: "chunk", stream: chunk.stream, offset: chunk.offset + skip, data });
      position.offsets[chunk.stream] = chunk.offset + skip + take;
      bytes += take;
    }
    // Stay on the last chunk: it may still grow by coalescing, or have a rest not read yet.
    position.sequence = this.headSequence + Math.max(0, Math.min(index, this.chunks.length) - 1 - this.head);
    return items;
  }

  /**
   * Resolves on the next append or end, or rejects when `signal` aborts.
   * @internal
   */
  waitForChange(signal?: AbortSignal): Promise<void> {
    if (this.ended) return Promise.resolve();
    if (this.changed === undefined) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.changed = { promise, resolve };
    }
    return raceSignal(this.changed.promise, signal);
  }

  /**
   * Called by a reader after its consumer took items, to release backpressure.
   * @internal
   */
  readerAdvanced(reader: OutputReader): void {
    if (reader !== this.pinned) return;
    this.dropOldest();
    this.chargeBudget();
    this.updateBackpressure();
  }

  private unreadByPinned(): number {
    if (this.pinned === undefined) return 0;
    const consumed = this.pinned.consumedOffsets;
    return this.written.stdout - consumed.stdout + (this.written.stderr - consumed.stderr);
  }

  private dropOldest(capacityBytes = this.capacityBytes, includingNewest = false): void {
    const pinnedAt = this.pinned?.consumedOffsets;
    let dropCount = 0;
    // The newest chunk stays while output is appended (it may still be coalesced into); a discard drops it too.
    const keep = includingNewest ? 0 : 1;
    while (this.retained > capacityBytes && this.head + dropCount < this.chunks.length - keep) {
      const chunk = this.chunks[this.head + dropCount];
      if (pinnedAt !== undefined && chunk.offset + chunk.data.length > pinnedAt[chunk.stream]) break;
      this.retained -= chunk.data.length + chunkOverheadBytes;
      this.firstRetained[chunk.stream] = chunk.offset + chunk.data.length;
      // The slot stays until compaction; its bytes must not.
      chunk.data = droppedData;
      dropCount++;
    }
    if (dropCount === 0) return;
    this.head += dropCount;
    this.headSequence += dropCount;
    // Removing the front of a large array is O(n): doing it on every drop made each append of a
    // full buffer cost a copy of all its chunks. Compact only once half the array is dropped.
    if (this.head >= 1024 && this.head * 2 >= this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
  }

  /** Charges the budget with what changed since the last charge. Its reclaim may trim this buffer meanwhile. */
  private chargeBudget(): void {
    const delta = this.retained - this.charged;
    if (delta === 0 || this.budget === undefined) return;
    // Recorded first: a trim by the budget's reclaim charges its own release from here.
    this.charged = this.retained;
    this.budget.charge(delta);
  }

  private updateBackpressure(): void {
    if (this.onBackpressure === undefined) return;
    const unread = this.unreadByPinned();
    // Output a pinned reader has not read cannot be dropped: with the budget exhausted, the producer
    // holds its share of the budget instead of filling its capacity.
    const exhausted = this.budget?.exhausted ?? false;
    const pauseAt = exhausted ? Math.min(this.capacityBytes, this.budget!.pinnedShareBytes) : this.capacityBytes;
    if (!this.paused && unread >= pauseAt) {
      this.paused = true;
      this.onBackpressure(true);
    } else if (this.paused && unread <= pauseAt / 2) {
      this.paused = false;
      this.onBackpressure(false);
    }
    if (this.paused && exhausted && !this.waitingForBudget) {
      // Once the budget has room again, the capacity is the bound again: look then.
      this.waitingForBudget = true;
      void this.budget!.nextRelease().then(() => {
        this.waitingForBudget = false;
        this.updateBackpressure();
      });
    }
  }

  private notify(): void {
    const changed = this.changed;
    this.changed = undefined;
    changed?.resolve();
  }
}

/** Where a reader is within an {@link OutputBuffer}. @internal */
export interface ReaderPosition {
  offsets: StreamOffsets;
  /** Sequence number of the chunk to look at first. */
  sequence: number;
}

/** Options for {@link OutputReader.items}. */
export interface ReadOptions {
  /** Keep waiting for new output until the buffer ends; otherwise stop when caught up. */
  follow: boolean;
  /** Stops the iteration (the generator returns, it does not throw) when aborted. */
  signal?: AbortSignal;
  /**
   * Hand out larger chunks when the consumer lags: each time the consumer asks for more, everything
   * retained past the reader (up to this many bytes) is taken at once, and consecutive chunks of one
   * stream are joined into one. A consumer that keeps up still gets each write as it comes (a
   * chunk is never held back to be joined with later output). Offsets, bytes and their order are
   * the same as without it. Default: chunks as they were stored (at most 64 KiB each).
   */
  maxChunkBytes?: number;
}

/**
 * OutputReader reads an {@link OutputBuffer} from a position, at its own pace, by offsets; create
 * one with {@link OutputBuffer.createReader}.
 */
export class OutputReader {
  private readonly position: ReaderPosition;
  private readonly consumed: StreamOffsets;

  /** @internal */
  constructor(
    private readonly buffer: OutputBuffer,
    from: StreamOffsets,
  ) {
    this.position = { offsets: { ...from }, sequence: 0 };
    this.consumed = { ...from };
  }

  /** Offsets after the last byte handed to the consumer, per stream. */
  get consumedOffsets(): Readonly<StreamOffsets> {
    return this.consumed;
  }

  /**
   * Yields output items, each once, in arrival order. The reader counts an item as consumed when
   * the consumer asks for the next one, which is what lets a pinned reader hold back a producer.
   */
  async *items(options: ReadOptions): AsyncGenerator<OutputItem, void, undefined> {
    const { signal, maxChunkBytes } = options;
    for (;;) {
      if (signal?.aborted) return;
      const batch =
        maxChunkBytes === undefined
          ? this.buffer.readAt(this.position, 16)
          : joinChunks(this.buffer.readAt(this.position, Number.POSITIVE_INFINITY, maxChunkBytes));
      if (batch.length === 0) {
        if (!options.follow || this.buffer.isEnded) return;
        try {
          await this.buffer.waitForChange(signal);
        } catch {
          return;
        }
        continue;
      }
      for (const item of batch) {
        yield item;
        if (item.kind === "chunk") {
          this.consumed[item.stream] = item.offset + item.data.length;
        } else {
          this.consumed[item.stream] = item.offset + item.missedBytes;
        }
        this.buffer.readerAdvanced(this);
      }
    }
  }
}

/** Joins runs of adjacent items that are contiguous chunks of the same stream into one chunk each. */
function joinChunks(items: OutputItem[]): OutputItem[] {
  if (items.length < 2) return items;
  const joined: OutputItem[] = [];
  let run: OutputChunk[] = [];
  const flush = () => {
    if (run.length === 1) joined.push(run[0]);
    else if (run.length > 1) {
      const first = run[0];
      joined.push({
        kind: "chunk",
        stream: first.stream,
        offset: first.offset,
        data: Buffer.concat(run.map((chunk) => chunk.data)),
      });
    }
    run = [];
  };
  for (const item of items) {
    const last = run.at(-1);
    if (
      item.kind === "chunk" &&
      (last === undefined || (last.stream === item.stream && last.offset + last.data.length === item.offset))
    ) {
      run.push(item);
      continue;
    }
    flush();
    if (item.kind === "chunk") run.push(item);
    else joined.push(item);
  }
  flush();
  return joined;
}
