import { ProcessError } from "./errors.js";
import { releaseBufferedMemory } from "./housekeeping/index.js";
import type { ManagedProcess } from "./managed-process.js";
import { MemoryBudget } from "./output/index.js";

/** Options of a {@link RetainedOutputBudget}. */
export interface RetainedOutputBudgetOptions {
  /** The budget in bytes: every record's retained output and pending stdin together. */
  limitBytes: number;
  /** The records that may be trimmed: every live one of the manager (exited ones are noted as they exit). */
  records: () => Iterable<ManagedProcess>;
}

/**
 * RetainedOutputBudget is the policy of the daemon's memory budget for commands: the {@link MemoryBudget}
 * every record's retained output and pending stdin count against, which records give up output when it is
 * full (exited records first, oldest exit first, then the live ones down to one common level), and which
 * stdin data it refuses. The process manager tells it of exits and removals; it knows nothing of RPC.
 */
export class RetainedOutputBudget {
  /** What every record's retained output and pending stdin count against. */
  readonly budget: MemoryBudget;
  /** Exited records that may still retain output, oldest exit first: the first to go when the budget is full. */
  private readonly exitedOutput = new Set<ManagedProcess>();

  /** Creates the budget; `records` is read when room must be made. */
  constructor(private readonly options: RetainedOutputBudgetOptions) {
    this.budget = new MemoryBudget({
      limitBytes: options.limitBytes,
      reclaim: (targetBytes) => this.reclaim(targetBytes),
    });
  }

  /**
   * Refuses `stdin_data` the budget cannot hold (LIMIT_EXCEEDED naming `max-retained-bytes`): larger
   * than the whole budget, or than what is left once output was dropped for it (the rest is stdin
   * nobody reads and output Exec callers have not read yet).
   */
  checkInputFits(bytes: number): void {
    const { budget } = this;
    const metadata = { limit: "max-retained-bytes", value: String(budget.limitBytes) };
    if (bytes > budget.limitBytes) {
      throw new ProcessError(
        `stdin_data of ${bytes} bytes is larger than the daemon's budget of ${budget.limitBytes} bytes for output and input`,
        "LIMIT_EXCEEDED",
        { metadata },
      );
    }
    if (bytes > 0 && !budget.fitsInput(bytes)) {
      throw new ProcessError(
        `stdin_data of ${bytes} bytes does not fit now: the daemon's budget of ${budget.limitBytes} bytes for output and input is full`,
        "LIMIT_EXCEEDED",
        { metadata },
      );
    }
  }

  /** Notes a current record that has exited: its output, if any is retained, is the first to go. */
  exited(managed: ManagedProcess): void {
    if (managed.retainedBytes > 0) this.exitedOutput.add(managed);
  }

  /**
   * Drops the retained output of an exited current record whose reader has everything (an Exec that
   * delivered its exit): its record stays, readers of its output get a gap. Without it every
   * finished Exec kept up to its capacity for the linger time (3,000 execs: 56 to 170 MB).
   */
  dropDelivered(managed: ManagedProcess): void {
    releaseBufferedMemory(managed.discardRetainedOutput());
    if (managed.retainedBytes === 0) this.exitedOutput.delete(managed);
  }

  /** A record goes: its retained output leaves the budget. */
  removed(managed: ManagedProcess): void {
    this.exitedOutput.delete(managed);
    releaseBufferedMemory(managed.releaseOutput());
  }

  /**
   * Makes room in the budget until at most `targetBytes` are held: first the output of exited
   * records, oldest exit first, then the live processes' output, the largest buffers first, trimmed
   * down to one common level (a chatty process loses its oldest output before a quiet one loses
   * any), then all live output but what cannot go: what an Exec caller has not read yet, and each
   * buffer's newest chunk. Readers of dropped output get a gap saying exactly what they missed.
   */
  private reclaim(targetBytes: number): void {
    const { budget } = this;
    const before = budget.usedBytes;
    try {
      for (const managed of this.exitedOutput) {
        if (budget.usedBytes <= targetBytes) return;
        managed.discardRetainedOutput();
        // What a pinned reader has not read yet stays, and the record with it.
        if (managed.retainedBytes === 0) this.exitedOutput.delete(managed);
      }
      if (budget.usedBytes <= targetBytes) return;
      const live = [...this.options.records()]
        .filter((managed) => managed.exit === undefined && managed.retainedBytes > 0)
        .sort((a, b) => b.retainedBytes - a.retainedBytes);
      const level = commonLevel(
        live.map((managed) => managed.retainedBytes),
        budget.usedBytes - targetBytes,
      );
      for (const managed of live) {
        if (managed.retainedBytes <= level) break;
        managed.trimRetainedOutput(level);
      }
      if (budget.usedBytes <= targetBytes) return;
      for (const managed of live) managed.trimRetainedOutput(0);
    } finally {
      releaseBufferedMemory(Math.max(0, before - budget.usedBytes));
    }
  }
}

/**
 * The level to trim the largest of these sizes (sorted largest first) down to, so that together
 * they give up at least `excessBytes`: every size above the level becomes the level, the others stay.
 */
export function commonLevel(sizes: readonly number[], excessBytes: number): number {
  let sum = 0;
  for (let index = 0; index < sizes.length; index++) {
    sum += sizes[index];
    const level = (sum - excessBytes) / (index + 1);
    if (level >= (sizes[index + 1] ?? 0)) return Math.max(0, Math.floor(level));
  }
  return 0;
}
