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
   * The tail: bytes retained (both streams together, in arrival order, beyond each stream's head)
   * before the oldest of them are dropped. A pinned reader (see {@link OutputBuffer.createReader})
   * turns dropping into backpressure instead.
   */
  capacityBytes: number;
  /**
   * The head: the first bytes of each stream, kept whatever the stream prints after them, so a
   * stream's retained output is its head and its tail with at most one gap between them. Default 0
   * (only the tail is kept).
   */
  headBytes?: number;
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
  /** Arrival order across both streams and both regions; never repeats. */
  sequence: number;
}

/** Chunks smaller than this are merged with the next write of the same stream. */
const coalesceBelowBytes = 4096;
/** Merged chunks stay below this size. */
const maxChunkBytes = 64 * 1024;
/** Bookkeeping cost charged per stored chunk, so many tiny writes stay bounded too. */
const chunkOverheadBytes = 64;
/** What a dropped chunk holds until its slot is compacted away. */
const droppedData = new Uint8Array(0);
/** A pinned reader's producer never pauses with less than this unread, whatever a small tail says. */
const minPauseBytes = 4096;
const streams = ["stdout", "stderr"] as const;

/**
 * OutputBuffer retains a process's output, both streams interleaved in arrival order, with
 * absolute per-stream byte offsets and a bound on memory.
 *
 * What it keeps of each stream is a head and a tail: the first {@link OutputBufferOptions.headBytes}
 * bytes of the stream, and its newest bytes within the tail, the last `capacityBytes` of both streams
 * together. When the tail exceeds its capacity its oldest chunks are dropped, so each stream has at
 * most one gap, between its head and its tail; a reader that asks for dropped output gets an
 * {@link OutputGap} saying exactly how much it missed, then the tail. Readers pull at their own pace,
 * so a stalled reader never slows the producer or other readers. A pinned reader (the caller of
 * Exec) is the exception: its unread output is never dropped, and the producer is asked to pause
 * instead.
 *
 * With a shared budget, the retained bytes count against it too: the budget's owner may trim the
 * buffer below its capacity. A trim shortens the tail from its start and keeps the heads (the end of
 * the output tells how it ended, its start what was run); only a trim below what the heads alone
 * hold drops them, whole, and the tail keeps the rest, so a stream still has one gap, from offset 0.
 * A discard (the output of an exited record nobody reads) drops heads and tail alike. Readers get a gap either way, and a
 * pinned reader's producer pauses early while the budget is exhausted.
 */
export class OutputBuffer {
  private readonly capacityBytes: number;
  private readonly headBytes: number;
  private onBackpressure?: (paused: boolean) => void;
  /** The head chunks still retained, in arrival order: bytes below `headBytes` of their stream. */
  private headChunks: StoredChunk[] = [];
  /** The tail chunks from index `tailStart` on; the entries before it were dropped and await compaction. */
  private tailChunks: StoredChunk[] = [];
  private tailStart = 0;
  /** The chunk appended last, which the next write of its stream may grow. */
  private newest?: StoredChunk;
  private nextSequence = 0;
  private headRetained = 0;
  private tailRetained = 0;
  private readonly written: StreamOffsets = { stdout: 0, stderr: 0 };
  /** Offset of the first head byte still retained, per stream (the head's end once it was dropped). */
  private readonly headFrom: StreamOffsets = { stdout: 0, stderr: 0 };
  /** Offset after the last tail byte dropped, per stream (0 while none was). */
  private readonly tailDroppedTo: StreamOffsets = { stdout: 0, stderr: 0 };
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
    this.headBytes = Math.max(0, options.headBytes ?? 0);
    this.onBackpressure = options.onBackpressure;
    this.budget = options.budget;
  }

  /** Total bytes written per stream: the offset the next byte of each will have. */
  get offsets(): Readonly<StreamOffsets> {
    return this.written;
  }

  /**
   * Offset of the first byte of the retained run that ends at the newest byte, per stream: the
   * tail's start when a gap lies before it (the head, if kept, is {@link headSnapshot}), else the
   * first retained byte (0 while nothing was dropped). {@link snapshot} copies the run.
   */
  get retainedFrom(): Readonly<StreamOffsets> {
    return { stdout: this.runFrom("stdout"), stderr: this.runFrom("stderr") };
  }

  /** Bytes retained now, both streams, heads and tail, with the bookkeeping charged per chunk. */
  get retainedBytes(): number {
    return this.headRetained + this.tailRetained;
  }

  /**
   * What was dropped, per stream at most one gap (between the head and the tail, or from offset 0
   * once the head went too), stdout first: what a reader from offset 0 would be told it missed.
   */
  dropped(): OutputGap[] {
    const gaps: OutputGap[] = [];
    for (const stream of streams) {
      const { headFrom, headTo, tailFrom } = this.regions(stream);
      const gap = (offset: number, end: number) => {
        if (end > offset) gaps.push({ kind: "gap", stream, offset, missedBytes: end - offset });
      };
      if (tailFrom > headTo && headFrom < headTo) {
        gap(0, headFrom);
        gap(headTo, tailFrom);
      } else if (tailFrom > headTo) {
        gap(0, tailFrom);
      } else {
        gap(0, headFrom);
      }
    }
    return gaps;
  }

  /**
   * Drops every retained byte a pinned reader has read (all of them without one), heads included,
   * as if the capacity were 0: readers that ask for them get an {@link OutputGap}. Returns the bytes
   * released. Used to keep the output of all processes together within a budget.
   */
  discardRetained(): number {
    const before = this.retainedBytes;
    this.dropOldestTail(0, true);
    this.dropHeads(false);
    this.chargeBudget();
    return before - this.retainedBytes;
  }

  /**
   * Drops output until at most `bytes` are retained: the tail's oldest bytes, as the capacity does
   * (what a pinned reader has not read and the newest chunk stay), down to what the heads leave of
   * `bytes`; heads that alone hold more than `bytes` go first (but for the newest chunk, which may be
   * a head's), and the tail keeps the rest. Readers that ask for what was dropped get an {@link OutputGap}. Returns the bytes
   * released. Used by a shared budget to make room.
   */
  trimTo(bytes: number): number {
    const before = this.retainedBytes;
    const target = Math.max(0, bytes);
    // Heads that alone exceed the target cannot be kept: the end of the output is worth more.
    if (this.headRetained > target) this.dropHeads(true);
    this.dropOldestTail(Math.max(0, target - this.headRetained));
    this.chargeBudget();
    return before - this.retainedBytes;
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
    const headRoom = this.headBytes - this.written[stream];
    if (headRoom > 0) {
      // The head's part is copied when the write straddles its end: a view would keep the whole
      // read buffer alive for as long as the head, and only the head's bytes are counted.
      const head = headRoom >= data.length ? data : Buffer.from(data.subarray(0, headRoom));
      this.store(this.headChunks, stream, head);
      data = data.subarray(head.length);
    }
    if (data.length > 0) this.store(this.tailChunks, stream, data);
    this.dropOldestTail(this.capacityBytes);
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
    this.dropOldestTail(this.capacityBytes);
    this.chargeBudget();
  }

  /** Copies the retained run of one stream that ends at its newest byte (see {@link retainedFrom}). */
  snapshot(stream: OutputStreamName): Uint8Array {
    const from = this.runFrom(stream);
    const parts: Uint8Array[] = [];
    for (const chunk of this.headChunks) if (chunk.stream === stream && chunk.offset >= from) parts.push(chunk.data);
    for (let index = this.tailStart; index < this.tailChunks.length; index++) {
      const chunk = this.tailChunks[index];
      if (chunk.stream === stream) parts.push(chunk.data);
    }
    return Buffer.concat(parts);
  }

  /**
   * Copies the head of one stream that a gap separates from its {@link snapshot}: its first bytes,
   * from offset 0. Empty when no gap follows the head (the snapshot holds it then) or the head was
   * dropped too.
   */
  headSnapshot(stream: OutputStreamName): Uint8Array {
    if (this.runFrom(stream) === this.headFrom[stream]) return new Uint8Array(0);
    return Buffer.concat(this.headChunks.filter((chunk) => chunk.stream === stream).map((chunk) => chunk.data));
  }

  /**
   * Reads up to `maxItems` items and `maxBytes` bytes of output for a reader at `position`,
   * advancing it (a chunk past `maxBytes` is cut, its rest read next time). Returns an empty array
   * when the reader has everything written so far.
   * @internal
   */
  readAt(position: ReaderPosition, maxItems: number, maxBytes = Number.POSITIVE_INFINITY): OutputItem[] {
    const items: OutputItem[] = [];
    const offsets = position.offsets;
    for (const stream of streams) {
      const next = this.nextRetained(stream, offsets[stream]);
      if (next > offsets[stream]) {
        items.push({ kind: "gap", stream, offset: offsets[stream], missedBytes: next - offsets[stream] });
        offsets[stream] = next;
      }
    }
    // Both regions in arrival order: merged by sequence from the reader's.
    const heads = this.headChunks;
    const tails = this.tailChunks;
    let headIndex = firstFrom(heads, 0, position.sequence);
    let tailIndex = firstFrom(tails, this.tailStart, position.sequence);
    let last: StoredChunk | undefined;
    let bytes = 0;
    while (items.length < maxItems && bytes < maxBytes && (headIndex < heads.length || tailIndex < tails.length)) {
      const chunk =
        tailIndex >= tails.length || (headIndex < heads.length && heads[headIndex].sequence < tails[tailIndex].sequence)
          ? heads[headIndex++]
          : tails[tailIndex++];
      last = chunk;
      const from = offsets[chunk.stream];
      const end = chunk.offset + chunk.data.length;
      if (end <= from) continue;
      if (chunk.offset > from) {
        // The reader finished this stream's head, and the tail starts later: the gap between comes first.
        items.push({ kind: "gap", stream: chunk.stream, offset: from, missedBytes: chunk.offset - from });
        offsets[chunk.stream] = chunk.offset;
        if (items.length >= maxItems) break;
      }
      const skip = Math.max(0, offsets[chunk.stream] - chunk.offset);
      const take = Math.min(chunk.data.length - skip, maxBytes - bytes);
      const data = skip === 0 && take === chunk.data.length ? chunk.data : chunk.data.subarray(skip, skip + take);
      items.push({ kind: "chunk", stream: chunk.stream, offset: chunk.offset + skip, data });
      offsets[chunk.stream] = chunk.offset + skip + take;
      bytes += take;
    }
    // Stay on the last chunk looked at: it may still grow by coalescing, or have a rest not read yet.
    if (last !== undefined) position.sequence = last.sequence;
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
    this.dropOldestTail(this.capacityBytes);
    this.chargeBudget();
    this.updateBackpressure();
  }

  /** Appends to a region, growing its newest chunk when the last write was a small one of the same stream there. */
  private store(region: StoredChunk[], stream: OutputStreamName, data: Uint8Array): void {
    const last = this.newest;
    if (
      last !== undefined &&
      last.stream === stream &&
      last.data !== droppedData &&
      region.at(-1) === last &&
      last.data.length < coalesceBelowBytes &&
      last.data.length + data.length <= maxChunkBytes
    ) {
      last.data = Buffer.concat([last.data, data]);
      this.addRetained(region, data.length);
    } else {
      const chunk = { stream, offset: this.written[stream], data, sequence: this.nextSequence++ };
      region.push(chunk);
      this.newest = chunk;
      this.addRetained(region, data.length + chunkOverheadBytes);
    }
    this.written[stream] += data.length;
  }

  private addRetained(region: StoredChunk[], bytes: number): void {
    if (region === this.headChunks) this.headRetained += bytes;
    else this.tailRetained += bytes;
  }

  /** Where a stream's head ends and its retained tail starts (they meet while nothing lies between). */
  private regions(stream: OutputStreamName): { headFrom: number; headTo: number; tailFrom: number } {
    const headTo = Math.min(this.written[stream], this.headBytes);
    return { headFrom: this.headFrom[stream], headTo, tailFrom: Math.max(this.tailDroppedTo[stream], headTo) };
  }

  /** The first offset of `stream` at or after `offset` that is retained (or not yet written). */
  private nextRetained(stream: OutputStreamName, offset: number): number {
    const { headFrom, headTo, tailFrom } = this.regions(stream);
    if (offset < headFrom) return headFrom < headTo ? headFrom : tailFrom;
    if (offset < headTo) return offset;
    return Math.max(offset, tailFrom);
  }

  private runFrom(stream: OutputStreamName): number {
    const { headFrom, headTo, tailFrom } = this.regions(stream);
    return tailFrom > headTo ? tailFrom : headFrom;
  }

  private unreadByPinned(): number {
    if (this.pinned === undefined) return 0;
    const consumed = this.pinned.consumedOffsets;
    return this.written.stdout - consumed.stdout + (this.written.stderr - consumed.stderr);
  }

  /**
   * Drops the tail's oldest bytes until it holds at most `tailBytes`: whole chunks, then the front of
   * the oldest left (a view, so the tail keeps its last bytes to the byte, not to the chunk). What a
   * pinned reader has not read stays, and so does the newest chunk (it may still be coalesced into;
   * a discard drops it too), at least its last byte.
   */
  private dropOldestTail(tailBytes: number, includingNewest = false): void {
    const pinnedAt = this.pinned?.consumedOffsets;
    const chunks = this.tailChunks;
    let dropCount = 0;
    while (this.tailRetained > tailBytes && this.tailStart + dropCount < chunks.length) {
      const index = this.tailStart + dropCount;
      const chunk = chunks[index];
      const end = chunk.offset + chunk.data.length;
      const readTo = Math.min(end, pinnedAt === undefined ? end : pinnedAt[chunk.stream]);
      const excess = this.tailRetained - tailBytes;
      const whole = readTo === end && (includingNewest || index < chunks.length - 1);
      if (whole && excess >= chunk.data.length) {
        this.tailRetained -= chunk.data.length + chunkOverheadBytes;
        this.tailDroppedTo[chunk.stream] = end;
        // The slot stays until compaction; its bytes must not.
        chunk.data = droppedData;
        dropCount++;
        continue;
      }
      const cut = Math.min(excess, readTo - chunk.offset, chunk.data.length - 1);
      if (cut > 0) {
        chunk.data = chunk.data.subarray(cut);
        chunk.offset += cut;
        this.tailRetained -= cut;
        this.tailDroppedTo[chunk.stream] = chunk.offset;
      }
      break;
    }
    if (dropCount === 0) return;
    this.tailStart += dropCount;
    // Removing the front of a large array is O(n): doing it on every drop made each append of a
    // full buffer cost a copy of all its chunks. Compact only once half the array is dropped.
    if (this.tailStart >= 1024 && this.tailStart * 2 >= this.tailChunks.length) {
      this.tailChunks = this.tailChunks.slice(this.tailStart);
      this.tailStart = 0;
    }
  }

  /**
   * Drops the heads, all but what a pinned reader has not read (a prefix of each stream's, so the
   * rest stays contiguous with the tail, which it has not read either) and, with `keepNewest`, the newest
   * chunk (a stream's last, so contiguous with nothing after it).
   */
  private dropHeads(keepNewest: boolean): void {
    if (this.headChunks.length === 0) return;
    const pinnedAt = this.pinned?.consumedOffsets;
    const kept: StoredChunk[] = [];
    for (const chunk of this.headChunks) {
      if (
        (keepNewest && chunk === this.newest) ||
        (pinnedAt !== undefined && chunk.offset + chunk.data.length > pinnedAt[chunk.stream])
      ) {
        kept.push(chunk);
      } else {
        this.headRetained -= chunk.data.length + chunkOverheadBytes;
        chunk.data = droppedData;
      }
    }
    this.headChunks = kept;
    for (const stream of streams) {
      this.headFrom[stream] =
        kept.find((chunk) => chunk.stream === stream)?.offset ?? Math.min(this.written[stream], this.headBytes);
    }
  }

  /** Charges the budget with what changed since the last charge. Its reclaim may trim this buffer meanwhile. */
  private chargeBudget(): void {
    const delta = this.retainedBytes - this.charged;
    if (delta === 0 || this.budget === undefined) return;
    // Recorded first: a trim by the budget's reclaim charges its own release from here.
    this.charged = this.retainedBytes;
    this.budget.charge(delta);
  }

  private updateBackpressure(): void {
    if (this.onBackpressure === undefined) return;
    const unread = this.unreadByPinned();
    // Output a pinned reader has not read cannot be dropped: with the budget exhausted, the producer
    // holds its share of the budget instead of filling its capacity.
    const exhausted = this.budget?.exhausted ?? false;
    const capacity = Math.max(minPauseBytes, this.capacityBytes);
    const pauseAt = exhausted ? Math.min(capacity, this.budget!.pinnedShareBytes) : capacity;
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

/** The index of the first chunk of `chunks` from `start` on whose sequence is at least `sequence`. */
function firstFrom(chunks: readonly StoredChunk[], start: number, sequence: number): number {
  let low = start;
  let high = chunks.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (chunks[middle].sequence < sequence) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** Where a reader is within an {@link OutputBuffer}. @internal */
export interface ReaderPosition {
  offsets: StreamOffsets;
  /** Arrival sequence number of the chunk to look at first (the last one looked at, which may have grown). */
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
