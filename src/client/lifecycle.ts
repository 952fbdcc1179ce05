import { SandboxError } from "./core/index.js";

/**
 * SandboxStatus is a sandbox's lifecycle state, as the Orbiter agent framework's `SandboxStatus`:
 * `init` (created, not started), `running` (connected, accepting commands), `idle` (stopped, may
 * start again), `error` (a start or the connection failed; may start again) and `closed` (terminal).
 */
export type SandboxStatus = "init" | "running" | "idle" | "error" | "closed";

/** The transitions the Orbiter sandbox allows, from each state. */
export const sandboxTransitions: Readonly<Record<SandboxStatus, readonly SandboxStatus[]>> = {
  init: ["running", "closed"],
  running: ["idle", "error", "closed"],
  idle: ["running", "error", "closed"],
  error: ["running", "closed"],
  closed: [],
};

/** Whether the Orbiter lifecycle allows going from `from` to `to`. */
export function canTransition(from: SandboxStatus, to: SandboxStatus): boolean {
  return sandboxTransitions[from].includes(to);
}

/**
 * Lifecycle holds a sandbox's state and allows only the Orbiter lifecycle's transitions: any other is a
 * SandboxError with code INVALID_TRANSITION, and the state stays as it was.
 */
export class Lifecycle {
  private current: SandboxStatus = "init";

  /** The current state. */
  get status(): SandboxStatus {
    return this.current;
  }

  /** Moves to `to`; throws SandboxError (INVALID_TRANSITION) when that lifecycle does not allow it. */
  transition(to: SandboxStatus): void {
    if (!canTransition(this.current, to)) {
      throw new SandboxError(`invalid sandbox transition: ${this.current} -> ${to}`, "INVALID_TRANSITION");
    }
    this.current = to;
  }

  /** Throws SandboxError (NOT_RUNNING) unless the state is `running`. */
  assertRunning(): void {
    if (this.current !== "running") {
      throw new SandboxError(`the sandbox is ${this.current}, not running: call start() first`, "NOT_RUNNING");
    }
  }
}
