import type { ProcessDetails, ProcessExit } from "./process-record.js";

/**
 * CommandRecord is what a handle knows of its process from the daemon: the record as last seen
 * (from the stream, `getStatus()` or `kill()`) and, once known, how it exited. `started` resolves
 * when the first record arrives: at once for a process already known, with Exec's first event for
 * a new command.
 */
export class CommandRecord {
  private known?: ProcessDetails;
  private ended?: ProcessExit;
  /** Resolves once the record is known; rejects when the command never started. */
  readonly started: Promise<void>;
  private resolveStarted!: () => void;
  private rejectStarted!: (error: unknown) => void;

  /** Creates a record, known already when `details` is given. */
  constructor(details?: ProcessDetails) {
    this.started = new Promise<void>((resolve, reject) => {
      this.resolveStarted = resolve;
      this.rejectStarted = reject;
    });
    this.started.catch(() => {});
    if (details !== undefined) this.adopt(details);
  }

  /** The record as last seen; undefined before the command started. */
  get details(): ProcessDetails | undefined {
    return this.known;
  }

  /** How the process ended, once known. */
  get exit(): ProcessExit | undefined {
    return this.ended;
  }

  /** Takes a record the daemon sent; an exit in it is kept (the first one known wins). */
  adopt(details: ProcessDetails): void {
    this.known = details;
    if (details.exit !== undefined && details.status !== "running") this.ended ??= details.exit;
    this.resolveStarted();
  }

  /** Takes the exit the stream reported. */
  exited(exit: ProcessExit): void {
    this.ended = exit;
    if (this.known !== undefined) this.known = { ...this.known, status: exit.status, exit };
  }

  /** Says the command never started (no-op once it did). */
  failStart(error: unknown): void {
    this.rejectStarted(error);
  }
}
