import { raceSignal } from "../../shared/abort.js";
import { availableMemoryBytes } from "../cgroups/index.js";

const mib = 1024 * 1024;

/**
 * The default {@link MemoryBudget} limit: a twentieth of the memory the daemon may use (the
 * machine's, or its own memory cgroup's limit when that is smaller), at least 128 MiB but never more
 * than a quarter of that memory, and at most 4 GiB. 24 GiB: 1.2 GiB; 2 GiB: 128 MiB; 256 MiB: 64 MiB.
 */
export function defaultMemoryBudgetBytes(memoryBytes: number = availableMemoryBytes()): number {
  const least = Math.min(128 * mib, memoryBytes / 4);
  return Math.floor(Math.min(4096 * mib, Math.max(least, memoryBytes / 20)));
}

/** Options for {@link MemoryBudget}. */
export interface MemoryBudgetOptions {
  /** Bytes all holders together may hold before the budget reclaims. */
  limitBytes: number;
  /**
   * Called, never re-entrantly, when the holders together hold more than the limit (or a charge
   * asks for room): drop what may be dropped until {@link MemoryBudget.usedBytes} is at most
   * `targetBytes`, or nothing more can go. Default: nothing is reclaimed.
   */
  reclaim?: (targetBytes: number) => void;
}

/**
 * MemoryBudget counts the bytes the daemon holds on behalf of its commands against one limit: the
 * output every record retains, live or exited, and the stdin bytes accepted and not yet written.
 * Holders charge what they take and give back what they let go of; past the limit the budget asks
 * its owner to reclaim (the process manager drops the oldest exited output first, then trims the
 * largest live buffers), and what cannot be dropped (input, output an Exec caller has not read yet)
 * is held back at its source: {@link fits} says no, and waiters wake at the next release.
 *
 * A reclaim goes a little below the limit (a sixty-fourth of it, from 64 KiB to 4 MiB), so a
 * daemon at its budget does not reclaim at every append.
 */
export class MemoryBudget {
  /** The limit, in bytes. */
  readonly limitBytes: number;
  private used = 0;
  private input = 0;
  private readonly slackBytes: number;
  private readonly reclaim?: (targetBytes: number) => void;
  private reclaiming = false;
  /**
   * The last reclaim could not reach its target at this many bytes held, and nothing was charged
   * since: a new attempt down to the same target would find nothing more to drop.
   */
  private fellShortAt?: { targetBytes: number };
  private released?: { promise: Promise<void>; resolve: () => void };
  private pinnedReaders = 0;

  /** Creates an empty budget. */
  constructor(options: MemoryBudgetOptions) {
    this.limitBytes = Math.max(0, options.limitBytes);
    this.slackBytes = Math.min(4 * mib, Math.max(64 * 1024, Math.floor(this.limitBytes / 64)));
    this.reclaim = options.reclaim;
  }

  /** Bytes held now, by all holders together. */
  get usedBytes(): number {
    return this.used;
  }

  /** Whether more than the limit is held now: what could be dropped was, and the rest cannot be. */
  get exhausted(): boolean {
    return this.used > this.limitBytes;
  }

  /**
   * Counts `deltaBytes` more held (negative: released). A charge past the limit reclaims at once; a
   * release wakes the waiters of {@link nextRelease}.
   */
  charge(deltaBytes: number): void {
    if (deltaBytes === 0) return;
    this.used += deltaBytes;
    if (deltaBytes > 0) this.fellShortAt = undefined;
    if (deltaBytes < 0) {
      this.wake();
    } else if (this.used > this.limitBytes) {
      this.reclaimTo(this.limitBytes - this.slackBytes);
    }
  }

  /**
   * Whether `bytes` more fit under the limit, once what may be dropped to make room for them was.
   * Counts nothing: the caller charges what it then takes.
   */
  fits(bytes: number): boolean {
    if (this.used + bytes <= this.limitBytes) return true;
    this.reclaimTo(this.limitBytes - bytes - this.slackBytes);
    return this.used + bytes <= this.limitBytes;
  }

  /** Stdin bytes held now (a part of {@link usedBytes}). */
  get inputBytes(): number {
    return this.input;
  }

  /** Counts `deltaBytes` more stdin bytes held (negative: written or dropped), as {@link charge} does. */
  chargeInput(deltaBytes: number): void {
    this.input += deltaBytes;
    this.charge(deltaBytes);
  }

  /**
   * Whether `bytes` more stdin bytes may be held: always while stdin bytes together stay within half
   * of the limit, so input is never starved by output nobody reads (an Exec caller that lags holds its
   * output, and it cannot be dropped); beyond that, as {@link fits} says.
   */
  fitsInput(bytes: number): boolean {
    return this.input + bytes <= this.limitBytes / 2 || this.fits(bytes);
  }

  /** Counts a pinned reader (an Exec caller's, whose output is never dropped) in (1) or out (-1). */
  countPinned(delta: 1 | -1): void {
    this.pinnedReaders += delta;
  }

  /**
   * What each pinned reader's unread output may hold while the budget is exhausted: the limit shared
   * among them, at least 64 KiB. So lagging Exec callers hold the budget together, not each its
   * capacity (at most twice the limit in all: what they held when it filled, and their shares
   * since), and each still moves in steps large enough to be fast.
   */
  get pinnedShareBytes(): number {
    return Math.max(64 * 1024, Math.floor(this.limitBytes / Math.max(1, this.pinnedReaders)));
  }

  /**
   * Wakes the waiters of {@link nextRelease} as a release does: a holder's state changed (a process
   * exited) and they must look again.
   */
  wake(): void {
    const released = this.released;
    this.released = undefined;
    released?.resolve();
  }

  /** Resolves at the next release of any bytes (or {@link wake}); rejects with `signal`'s reason when it aborts first. */
  nextRelease(signal?: AbortSignal): Promise<void> {
    if (this.released === undefined) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.released = { promise, resolve };
    }
    return raceSignal(this.released.promise, signal);
  }

  private reclaimTo(targetBytes: number): void {
    // Reclaiming releases bytes, and a release never reclaims; a charge made while reclaiming (none
    // is expected) waits for the next one.
    if (this.reclaim === undefined || this.reclaiming) return;
    const target = Math.max(0, targetBytes);
    // Waiters look again at every release; while only undroppable bytes are held, their looks must
    // not each walk every record for nothing.
    if (this.fellShortAt !== undefined && this.fellShortAt.targetBytes <= target) return;
    this.reclaiming = true;
    try {
      this.reclaim(target);
    } finally {
      this.reclaiming = false;
    }
    this.fellShortAt = this.used > target ? { targetBytes: target } : undefined;
  }
}
