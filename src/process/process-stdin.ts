import { raceSignal } from "../shared/abort.js";
import { maxPendingInputBytes, ptySizeProblem } from "../shared/limits.js";
import { ProcessError } from "./errors.js";
import type { MemoryBudget } from "./output/index.js";
import type { SpawnedChild } from "./spawn/index.js";

/** What {@link ProcessStdin} needs to know of the process it writes to. */
export interface StdinOwner {
  /** The process id, for messages and error details. */
  readonly id: string;
  /** Whether it was started with a stdin (or a PTY) to write to. */
  readonly acceptsInput: boolean;
  /** Whether it runs in a PTY (resizes need one). */
  readonly pty: boolean;
  /** The child while it runs; undefined while it starts, drains or has exited. */
  runningChild(): SpawnedChild | undefined;
  /** Whether its record says it has exited. */
  hasExited(): boolean;
  /** Whether its leader is gone (noticed, or asked of the OS now). */
  leaderGone(): boolean;
}

/** How long a write refused by a closed stdin waits for the leader's exit before saying stdin was closed. */
const exitAfterClosedStdinMs = 250;

/**
 * ProcessStdin is a process's input: writes queued in call order behind its start, counted as
 * pending against {@link maxPendingInputBytes} and the daemon's memory budget until the OS took
 * them, the end of input after the writes accepted before it, and PTY resizes in order with them.
 */
export class ProcessStdin {
  private closed = false;
  private written = 0;
  private pending = 0;
  /** Settles when the last accepted write has settled; starts settled once the process runs (or failed). */
  private chain: Promise<void>;
  private release: () => void = () => {};

  constructor(
    private readonly owner: StdinOwner,
    private readonly budget: MemoryBudget,
  ) {
    this.chain = new Promise((resolve) => (this.release = resolve));
  }

  /** Lets the writes queued so far go: the process runs now, or failed to start (they then fail). */
  started(): void {
    this.release();
    this.release = () => {};
  }

  /** Settles once every write accepted so far has settled (written, refused or dropped). */
  get settled(): Promise<void> {
    return this.chain;
  }

  /** Bytes written to stdin so far. */
  get bytesWritten(): number {
    return this.written;
  }

  /** Whether stdin was closed (EOF asked for). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** See `ManagedProcess.assertAcceptsInput`. */
  assertAccepts(): void {
    if (!this.owner.acceptsInput) throw noStdin(this.owner.id);
    if (this.owner.hasExited()) throw processNotRunning(this.owner.id);
  }

  /** See `ManagedProcess.write`. */
  write(data: Uint8Array, signal?: AbortSignal): Promise<number> {
    return this.enqueue(data, signal, "refuse");
  }

  /** See `ManagedProcess.writeReceived`. */
  writeReceived(data: Uint8Array, signal?: AbortSignal): Promise<number> {
    return this.enqueue(data, signal, "count");
  }

  /** See `ManagedProcess.waitForInputRoom`. */
  async waitForRoom(signal?: AbortSignal): Promise<void> {
    while (!this.owner.hasExited() && !this.closed) {
      if (this.pending < maxPendingInputBytes && this.budget.fitsInput(0)) return;
      // A settled write releases its bytes from the budget, and so does whatever else makes room;
      // the exit wakes the waiters too (see ManagedProcess.finish).
      await raceSignal(this.budget.nextRelease(), signal, (reason) => writeCancelled(this.owner.id, reason));
    }
  }

  /** See `ManagedProcess.closeInput`. */
  close(): void {
    if (!this.owner.acceptsInput) throw noStdin(this.owner.id);
    if (this.closed || this.owner.hasExited()) return;
    this.closed = true;
    void this.chain.then(() => this.owner.runningChild()?.closeInput());
  }

  /** See `ManagedProcess.resize`. */
  resize(cols: number, rows: number): Promise<void> {
    const problem = ptySizeProblem(cols, rows, "resize");
    if (problem !== undefined) throw new ProcessError(problem, "INVALID_ARGUMENT", { metadata: { field: "resize" } });
    const id = this.owner.id;
    if (!this.owner.pty)
      throw new ProcessError(`process ${id} has no pty`, "PTY_NOT_OPEN", { metadata: { process_id: id } });
    const applied = this.chain.then(() => this.owner.runningChild()?.resize(cols, rows));
    this.chain = applied.catch(() => {});
    return applied;
  }

  /** Counts `data` as pending and queues its write behind the earlier ones; past the pending limit it is refused or counted. */
  private enqueue(data: Uint8Array, signal: AbortSignal | undefined, pastLimit: "refuse" | "count"): Promise<number> {
    const id = this.owner.id;
    this.assertAccepts();
    if (this.closed) throw stdinClosed(id);
    const cancelled = (reason: unknown) => writeCancelled(id, reason);
    if (signal?.aborted) throw cancelled(signal.reason);
    if (
      data.length > maxPendingInputBytes ||
      (pastLimit === "refuse" && this.pending + data.length > maxPendingInputBytes)
    )
      throw stdinFull(id);
    if (data.length > this.budget.limitBytes) {
      throw new ProcessError(
        `input of ${data.length} bytes for process ${id} is larger than the daemon's budget of ${this.budget.limitBytes} bytes for output and input`,
        "LIMIT_EXCEEDED",
        { metadata: { limit: "max-retained-bytes", value: String(this.budget.limitBytes), process_id: id } },
      );
    }
    // Output gives way to input (fits drops it); what cannot go is input nobody reads and output an
    // Exec caller has not read, and a write that waits for nothing is refused against those.
    if (pastLimit === "refuse" && !this.budget.fitsInput(data.length)) {
      throw new ProcessError(
        `stdin of process ${id} cannot take ${data.length} bytes now: the daemon's budget of ${this.budget.limitBytes} bytes for output and input is full`,
        "LIMIT_EXCEEDED",
        { metadata: { limit: "max-retained-bytes", value: String(this.budget.limitBytes), process_id: id } },
      );
    }
    this.pending += data.length;
    this.budget.chargeInput(data.length);
    const written = this.chain
      .then(() => {
        // Skipped, not written: the caller is gone and nothing of it reached the child.
        if (signal?.aborted) throw cancelled(signal.reason);
        const child = this.owner.runningChild();
        if (child === undefined) throw processNotRunning(id);
        return child.write(data).then(
          () => {
            this.written += data.length;
            return this.written;
          },
          async (cause: unknown) => {
            // The child refuses writes once its stdin is closed, which its exit does. A killed leader
            // closes its end as it dies, moments before it can be reaped: give its exit that long.
            const exited = this.owner.leaderGone() || (await leaderExitsSoon(child));
            throw exited ? processNotRunning(id, cause) : stdinClosed(id, cause);
          },
        );
      })
      .finally(() => {
        this.pending -= data.length;
        this.budget.chargeInput(-data.length);
      });
    // The next write waits for this one to be written (or dropped): a child write settles when the
    // bytes were taken by the OS or, at the latest, once the process has exited.
    this.chain = written.then(
      () => {},
      () => {},
    );
    return raceSignal(written, signal, cancelled);
  }
}

/** PROCESS_NOT_RUNNING for process `id`, which has exited. */
export function processNotRunning(id: string, cause?: unknown): ProcessError {
  return new ProcessError(`process has exited: ${id}`, "PROCESS_NOT_RUNNING", { metadata: { process_id: id }, cause });
}

function writeCancelled(id: string, cause: unknown): ProcessError {
  return new ProcessError(`write to stdin of process ${id} was cancelled`, "CANCELED", {
    metadata: { process_id: id },
    cause,
  });
}

function stdinFull(id: string): ProcessError {
  return new ProcessError(
    `stdin of process ${id} is full: the limit of ${maxPendingInputBytes} pending bytes is reached`,
    "LIMIT_EXCEEDED",
    { metadata: { limit: "max-pending-input-bytes", value: String(maxPendingInputBytes), process_id: id } },
  );
}

function noStdin(id: string): ProcessError {
  return new ProcessError(`process ${id} has no stdin: start it with stdin, stdin_data or pty`, "STDIN_NOT_OPEN", {
    metadata: { process_id: id },
  });
}

function stdinClosed(id: string, cause?: unknown): ProcessError {
  return new ProcessError(`stdin of process ${id} is closed`, "STDIN_NOT_OPEN", {
    metadata: { process_id: id },
    cause,
  });
}

/** Whether `child`'s leader exits within {@link exitAfterClosedStdinMs}. */
async function leaderExitsSoon(child: SpawnedChild): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), exitAfterClosedStdinMs);
  });
  try {
    return await Promise.race([child.exited.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}
