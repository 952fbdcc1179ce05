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

/** Throws SandboxError (INVALID_TRANSITION) unless the Orbiter lifecycle allows going from `from` to `to`. */
export function assertTransition(from: SandboxStatus, to: SandboxStatus): void {
  if (!canTransition(from, to)) {
    throw new SandboxError(`invalid sandbox transition: ${from} -> ${to}`, "INVALID_TRANSITION");
  }
}

/** The error of a command asked of a sandbox in `status`, which is not `running` (NOT_RUNNING). */
export function notRunningError(status: SandboxStatus): SandboxError {
  return new SandboxError(`the sandbox is ${status}, not running: call start() first`, "NOT_RUNNING");
}
