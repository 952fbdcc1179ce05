import type { OutputStreamName } from "../output/index.js";

/**
 * How a child's leader process ended: an exit code, or the signal that killed it. Both are null when
 * it is not known (something else reaped the leader).
 */
export interface ChildExit {
  /** Exit code, or null when ended by a signal. */
  code: number | null;
  /** Signal name ("SIGKILL"), or null when it exited. */
  signal: string | null;
}

/** What {@link SpawnChildOptions.onOutput} and friends report to the owner of a child. */
export interface ChildEvents {
  /** Bytes read from one of the child's streams, in arrival order. */
  onOutput(stream: OutputStreamName, data: Uint8Array): void;
}

/** Options shared by the pipe and PTY spawners. */
export interface SpawnChildOptions extends ChildEvents {
  /** Program to run, resolved or looked up in `env.PATH`. */
  file: string;
  /** Arguments, without the program name. */
  args: readonly string[];
  /** Absolute working directory; "" to stay in the daemon's (the helper enters the command's). */
  cwd: string;
  /** The complete environment of the child. */
  env: Record<string, string>;
  /** Open a writable stdin; otherwise stdin is /dev/null (ignored for a PTY, which always has input). */
  stdin: boolean;
  /** Open fd 3 for the native helper's start report (see `spawnPipeChild`), on pipes or in a PTY. */
  statusFd?: boolean;
  /**
   * `cgroup.procs` files the child joins before it execs, so nothing of the command runs outside
   * them: the addon's spawn does it (see `Launcher`, which plans it only where the addon can), on
   * pipes only. A join that fails is a {@link HelperStartError}-like failure at stage `cgroup`.
   */
  joinCgroups?: readonly string[];
}

/**
 * SpawnedChild is a running child process in a process group of its own, seen the same way whether
 * it runs on pipes or in a PTY. Its pid is also its process group id.
 */
export interface SpawnedChild {
  /** OS pid and process group id. */
  readonly pid: number;
  /**
   * Resolves as soon as the leader has exited and was reaped, before its output may have drained.
   * From then on its pid, and the group id once the group is empty, may be reused.
   */
  readonly exited: Promise<ChildExit>;
  /**
   * Resolves when the leader has exited and all of its output was delivered through `onOutput`.
   * A grandchild that keeps the output open holds this back at most {@link outputDrainLimitMs} on
   * pipes and four times that in a PTY, not counting the time output is paused (by
   * {@link pauseOutput}), which can be unbounded.
   */
  readonly finished: Promise<ChildExit>;
  /**
   * Whether the leader has exited, asked of the OS now (true once `exited` resolved). Undefined where
   * the spawner cannot tell before its own notification.
   */
  hasExited?(): boolean;
  /**
   * Writes to stdin; resolves once the bytes were handed to the OS. Rejects when stdin is closed,
   * and a pending write rejects once the leader has exited, at the latest when `finished` resolves.
   */
  write(data: Uint8Array): Promise<void>;
  /** Closes stdin (EOF); for a PTY, sends the EOF character. */
  closeInput(): void;
  /** Changes the terminal size; a no-op on pipes. */
  resize(cols: number, rows: number): void;
  /** Stops reading output until {@link resumeOutput}: the child blocks once the pipe fills. */
  pauseOutput(): void;
  /** Resumes reading output. */
  resumeOutput(): void;
}

/** How long after the leader exits output is still read when something else holds it open. */
export const outputDrainLimitMs = 750;
/** Output is considered drained after this long without data once the leader has exited. */
export const outputQuietMs = 100;
