import type { ExitCause, KillOrigin, StartStage } from "../shared/exit-cause.js";

export type { ExitCause, KillOrigin, StartStage };

/**
 * Why the daemon sent a process its first kill: a client's request ({@link KillOrigin}), the
 * daemon's own shutdown, or a start it stopped (see {@link ExitFacts.startFailure}). A timeout is
 * told apart by {@link ExitFacts.timedOut}.
 */
export type KillReason = KillOrigin | "daemon_shutdown" | "start_failed";

/** A start that failed: the step, the errno name where there is one, and the words. */
export interface StartFailure {
  /** The step that failed. */
  readonly stage: StartStage;
  /** The errno name ("ENOENT"), or undefined when the step failed without one. */
  readonly errno?: string;
  /** What failed, in words ("program not found: foo"). */
  readonly message: string;
}

/** Everything the daemon knows about the end of a process, for {@link classifyExit}. */
export interface ExitFacts {
  /**
   * How the leader ended: its exit code, or the name of the signal that ended it. Undefined when
   * the daemon does not know (it never reaped the leader, or lost track of it).
   */
  readonly leader?: { readonly code: number | null; readonly signal: string | null };
  /** Why it never ran, or why it was stopped as it started; undefined when it started. */
  readonly startFailure?: StartFailure;
  /** Whether its `timeoutMs` expired and the daemon killed it then. */
  readonly timedOut: boolean;
  /** Why the daemon sent its first kill; undefined when it sent none. */
  readonly killReason?: KillReason;
  /**
   * Signals sent to it through SendInput (not counted as kills): one of them ending it is a kill on
   * request too. Default none.
   */
  readonly inputSignals?: ReadonlySet<string>;
  /**
   * Whether the kernel killed a task of the command for memory: the oom_kill count of the
   * command's own memory cgroup (`memory.events`, or v1's `memory.oom_control`) rose while it ran.
   * Undefined where that cannot be told (no memory cgroup of its own): never guessed from SIGKILL.
   */
  readonly killedForMemory: boolean | undefined;
}

/** The cause of an exit, with the detail that goes with it. */
export interface ClassifiedExit {
  /** Why it ended. */
  readonly cause: ExitCause;
  /** For `killed_on_request`: what asked for it. */
  readonly killOrigin?: KillOrigin;
  /** For `start_failed`: the step that failed. */
  readonly startStage?: StartStage;
  /** For `start_failed`: the errno name, when there was one. */
  readonly errno?: string;
}

/**
 * Classifies the end of a process from the facts the daemon has, first match wins:
 *
 * 1. `start_failed` when it never started (or was stopped as it started), with the stage and errno;
 * 2. `unknown` when the leader's end is not known;
 * 3. `out_of_memory` when the kernel killed a task of it for memory and it did not succeed (a
 *    signal, or a non-zero code: a build whose compiler was OOM-killed exits 2);
 * 4. `timed_out` when its timeout fired;
 * 5. the reason of the daemon's first kill, when it sent one: `daemon_shutdown`, or
 *    `killed_on_request` with its origin, whether the process then died of the signal or exited
 *    on its own (a server that exits 0 on SIGTERM was still ended by the request);
 * 6. `killed_on_request` (origin `send_input`) when a signal sent through SendInput ended it;
 * 7. `signaled` when any other signal ended it; `exited` otherwise.
 */
export function classifyExit(facts: ExitFacts): ClassifiedExit {
  const failure = facts.startFailure;
  if (failure !== undefined) {
    return failure.errno === undefined
      ? { cause: "start_failed", startStage: failure.stage }
      : { cause: "start_failed", startStage: failure.stage, errno: failure.errno };
  }
  const leader = facts.leader;
  if (leader === undefined || (leader.code === null && leader.signal === null)) return { cause: "unknown" };
  if (facts.killedForMemory === true && (leader.signal !== null || leader.code !== 0))
    return { cause: "out_of_memory" };
  if (facts.timedOut) return { cause: "timed_out" };
  if (facts.killReason === "daemon_shutdown") return { cause: "daemon_shutdown" };
  // Stopped as it started, its failure not told (never so by the record): a failed start still.
  if (facts.killReason === "start_failed") return { cause: "start_failed" };
  if (facts.killReason !== undefined) return { cause: "killed_on_request", killOrigin: facts.killReason };
  if (leader.signal !== null) {
    return facts.inputSignals?.has(leader.signal) === true
      ? { cause: "killed_on_request", killOrigin: "send_input" }
      : { cause: "signaled" };
  }
  return { cause: "exited" };
}
