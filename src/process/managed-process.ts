import { ProcessError } from "./errors.js";
import { maxPendingInputBytes } from "./limits.js";
import type { SpawnedChild } from "./child.js";
import { OutputBuffer, type OutputReader, type OutputStreamName } from "./output-buffer.js";
import type { SignalName } from "./signals.js";

/** Lifecycle state of a process, as in seed 000. */
export type ProcessStatus = "starting" | "running" | "completed" | "failed" | "killed" | "error";

/** Milliseconds between a kill's signal and the SIGKILL that follows when the process is still running. */
export const defaultKillGracePeriodMs = 5000;

/** How a process ended. */
export interface ProcessExit {
  /** completed (code 0), failed (non-zero), killed (by a signal) or error (never started). */
  readonly status: Exclude<ProcessStatus, "starting" | "running">;
  /** Exit code, or null when a signal ended it. 127 when the program was not found. */
  readonly exitCode: number | null;
  /** Name of the signal that ended it, or null. */
  readonly signal: string | null;
  /** Killed because its timeout expired. */
  readonly timedOut: boolean;
  /**
   * A signal was sent on request through {@link ManagedProcess.kill} (KillProcess, KillAllProcesses,
   * a cancelled Exec, shutdown), whatever the signal and whether or not it ended the process.
   */
  readonly killed: boolean;
  readonly startTime: Date;
  readonly endTime: Date;
  /** Run time in milliseconds, with sub-millisecond precision. */
  readonly durationMs: number;
  /** Total bytes written to stdout. */
  readonly stdoutBytes: number;
  /** Total bytes written to stderr. */
  readonly stderrBytes: number;
  /** Why it could not start, for status error. */
  readonly error?: string;
}

/** The fixed facts about a process, known when it is created. */
export interface ProcessDescription {
  readonly id: string;
  readonly command: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly sessionId: string;
  readonly pty: boolean;
  /** Whether stdin is open for {@link ManagedProcess.write}. */
  readonly stdin: boolean;
  readonly autoCleanup: boolean;
  /** Time limit in milliseconds; 0 for none. */
  readonly timeoutMs: number;
}


/** Options for creating a {@link ManagedProcess}. */
export interface ManagedProcessOptions extends ProcessDescription {
  /** Bytes of output retained. */
  outputCapacityBytes: number;
  /** Give the output buffer a pinned reader ({@link ManagedProcess.pinnedReader}), as Exec does. */
  pinnedReader: boolean;
}

/**
 * ManagedProcess is the daemon's record of one process: its description, status, retained output,
 * stdin and exit. It owns the child's process group: kill, timeout and exit all signal the group.
 */
export class ManagedProcess implements ProcessDescription {
  readonly id: string;
  readonly command: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly sessionId: string;
  readonly pty: boolean;
  readonly stdin: boolean;
  readonly autoCleanup: boolean;
  readonly timeoutMs: number;
  /** Retained output of both streams. */
  readonly output: OutputBuffer;
  /** The Exec caller's reader, whose unread output is never dropped; undefined for others. */
  readonly pinnedReader?: OutputReader;
  /** When the record was created (the spawn time, to the millisecond). */
  readonly startTime = new Date();
  /** Resolves with the exit once the process has exited and all of its output is in {@link output}. */
  readonly exited: Promise<ProcessExit>;

  private child?: SpawnedChild;
  /** The pid once the child is let go of at exit. */
  private exitedPid = 0;
  private currentStatus: ProcessStatus = "starting";
  private exitInfo?: ProcessExit;
  private readonly startedAt = performance.now();
  private killedOnRequest = false;
  /** A kill requested while starting, applied by {@link attach}. */
  private pendingKill?: { signal: SignalName; gracePeriodMs: number };
  /** The leader has exited: its group is no longer signalled, its id may be reused. */
  private leaderExited = false;
  private timedOut = false;
  private inputClosed = false;
  private writtenBytes = 0;
  private pendingInputBytes = 0;
  /** Settles when the last accepted write has settled; starts settled once attached (or failed). */
  private writeChain: Promise<void>;
  private resolveStarted!: () => void;
  private timeoutTimer?: NodeJS.Timeout;
  private escalationTimer?: NodeJS.Timeout;
  private resolveExited!: (exit: ProcessExit) => void;

  /** Creates a record in status starting; {@link attach} or {@link failToStart} follows. */
  constructor(options: ManagedProcessOptions) {
    this.id = options.id;
    this.command = options.command;
    this.args = options.args;
    this.cwd = options.cwd;
    this.sessionId = options.sessionId;
    this.pty = options.pty;
    this.stdin = options.stdin;
    this.autoCleanup = options.autoCleanup;
    this.timeoutMs = options.timeoutMs;
    this.output = new OutputBuffer({
      capacityBytes: options.outputCapacityBytes,
      onBackpressure: (paused) => (paused ? this.child?.pauseOutput() : this.child?.resumeOutput()),
    });
    if (options.pinnedReader) this.pinnedReader = this.output.createReader({}, { pinned: true });
    this.exited = new Promise((resolve) => (this.resolveExited = resolve));
    this.writeChain = new Promise((resolve) => (this.resolveStarted = resolve));
  }

  /** Current status. */
  get status(): ProcessStatus {
    return this.currentStatus;
  }

  /** OS pid (and process group id), or 0 when it never started. */
  get pid(): number {
    return this.child?.pid ?? this.exitedPid;
  }

  /** How it ended; undefined while running. */
  get exit(): ProcessExit | undefined {
    return this.exitInfo;
  }

  /** Total bytes written to stdin so far. */
  get bytesWritten(): number {
    return this.writtenBytes;
  }

  /** Whether stdin has been closed (or was never open). */
  get isInputClosed(): boolean {
    return !this.stdin || this.inputClosed || this.exitInfo !== undefined;
  }

  /** Delivers output from the child into the buffer. @internal */
  handleOutput(stream: OutputStreamName, data: Uint8Array): void {
    this.output.append(stream, data);
  }

  /** Takes ownership of a spawned child: status running, timeout armed, exit awaited. @internal */
  attach(child: SpawnedChild): void {
    this.child = child;
    this.currentStatus = "running";
    this.resolveStarted();
    if (this.timeoutMs > 0) {
      this.timeoutTimer = setTimeout(() => {
        this.timedOut = true;
        this.signalGroup("SIGKILL");
      }, this.timeoutMs);
    }
    if (this.pendingKill !== undefined) this.kill(this.pendingKill.signal, this.pendingKill.gracePeriodMs);
    void child.exited.then(() => {
      // Whatever the leader left behind in its group goes with it: nothing runs unaccounted. This
      // is the last signal: once the group is empty its id may be reused by an unrelated process,
      // so no timer or kill may signal it while the output drains.
      this.signalGroup("SIGKILL", true);
      this.leaderExited = true;
      clearTimeout(this.timeoutTimer);
      clearTimeout(this.escalationTimer);
    });
    // A write still pending at the exit settles once the child stops it: none outlives the record.
    void child.finished.then(async (exit) => {
      await this.writeChain;
      this.finish({
        status: exit.signal !== null ? "killed" : exit.code === 0 ? "completed" : "failed",
        exitCode: exit.code,
        signal: exit.signal,
      });
    });
  }

  /** Records that the process could not start (status error, `exitCode` as a shell gives it). @internal */
  failToStart(error: string, exitCode: number): void {
    this.resolveStarted();
    this.finish({ status: "error", exitCode, signal: null, error });
  }

  /**
   * Sends `signal` to the whole process group. With `gracePeriodMs` >= 0 the group is sent SIGKILL
   * if the process is still running that many milliseconds later. A kill of a process still
   * starting is sent as soon as it runs. Returns false when its leader had already exited.
   */
  kill(signal: SignalName = "SIGTERM", gracePeriodMs = defaultKillGracePeriodMs): boolean {
    if (this.exitInfo !== undefined || this.leaderGone()) return false;
    if (this.child === undefined) {
      // The strongest request wins: a later SIGTERM must not soften an earlier SIGKILL.
      if (this.pendingKill?.signal !== "SIGKILL") this.pendingKill = { signal, gracePeriodMs };
      return true;
    }
    this.killedOnRequest = true;
    this.signalGroup(signal);
    if (gracePeriodMs >= 0 && signal !== "SIGKILL" && this.escalationTimer === undefined) {
      this.escalationTimer = setTimeout(() => this.signalGroup("SIGKILL"), gracePeriodMs);
    }
    return true;
  }

  /** Sends a signal to the process group without counting it as a kill (SendInput's signals). */
  signal(signal: SignalName): void {
    if (this.exitInfo !== undefined || this.leaderGone()) {
      throw new ProcessError(`process has exited: ${this.id}`, "failed-precondition");
    }
    this.signalGroup(signal);
  }

  /**
   * Writes bytes to stdin, in call order. Resolves with the total bytes written once these were
   * handed to the OS. Throws a ProcessError: "failed-precondition" when the process has no stdin,
   * stdin was closed, or it has exited (a write racing the exit, EPIPE, included, never a crash);
   * "resource-exhausted" when more than {@link maxPendingInputBytes} would be pending; "cancelled"
   * when `signal` aborts first. An aborted write that had not reached the child yet is dropped;
   * one the child had already taken (a PTY or pipe writes what it took in order) still counts in
   * {@link bytesWritten} once it is written, as it then reaches the process.
   */
  async write(data: Uint8Array, signal?: AbortSignal): Promise<number> {
    this.assertInputOpen();
    throwIfAborted(this.id, signal);
    if (this.pendingInputBytes + data.length > maxPendingInputBytes) {
      throw new ProcessError(
        `stdin of process ${this.id} is full: the limit of ${maxPendingInputBytes} pending bytes is reached`,
        "resource-exhausted",
      );
    }
    this.pendingInputBytes += data.length;
    const written = this.writeChain
      .then(() => {
        // Skipped, not written: the caller is gone and nothing of it reached the child.
        throwIfAborted(this.id, signal);
        if (this.exitInfo !== undefined || this.leaderExited || this.child === undefined) {
          throw new ProcessError(`process has exited: ${this.id}`, "failed-precondition");
        }
        return this.child.write(data).then(
          () => {
            this.writtenBytes += data.length;
            return this.writtenBytes;
          },
          (cause: unknown) => {
            throw new ProcessError(`stdin of process ${this.id} is closed`, "failed-precondition", { cause });
          },
        );
      })
      .finally(() => (this.pendingInputBytes -= data.length));
    // The next write waits for this one to be written (or dropped): a child write settles when the
    // bytes were taken by the OS or, at the latest, once the process has exited.
    this.writeChain = written.then(
      () => {},
      () => {},
    );
    if (signal === undefined) return written;
    return new Promise<number>((resolve, reject) => {
      const onAbort = () => reject(abortError(this.id, signal));
      signal.addEventListener("abort", onAbort, { once: true });
      written.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
    });
  }

  /**
   * Closes stdin: further writes are refused at once, and the end of input reaches the process
   * after the writes already accepted, or not at all when it exits first. Resolves without
   * waiting for those writes, which a process that does not read may hold forever. Closing twice
   * is a no-op.
   */
  async closeInput(): Promise<void> {
    if (!this.stdin) throw new ProcessError(`process ${this.id} has no stdin`, "failed-precondition");
    if (this.inputClosed || this.exitInfo !== undefined) return;
    this.inputClosed = true;
    void this.writeChain.then(() => {
      if (this.exitInfo === undefined && !this.leaderExited) this.child?.closeInput();
    });
  }

  /** Resizes the PTY. Throws a ProcessError ("failed-precondition") for a process without one. */
  resize(cols: number, rows: number): void {
    if (!this.pty) throw new ProcessError(`process ${this.id} has no pty`, "failed-precondition");
    if (this.exitInfo === undefined) this.child?.resize(cols, rows);
  }

  /** Releases the pinned reader (the Exec caller left): output is dropped, not held, from now on. */
  releasePinnedReader(): void {
    if (this.pinnedReader !== undefined) this.output.unpin(this.pinnedReader);
  }

  private assertInputOpen(): void {
    if (!this.stdin) throw new ProcessError(`process ${this.id} has no stdin`, "failed-precondition");
    if (this.exitInfo !== undefined) throw new ProcessError(`process has exited: ${this.id}`, "failed-precondition");
    if (this.inputClosed) throw new ProcessError(`stdin of process ${this.id} is closed`, "failed-precondition");
  }

  /**
   * Whether the leader has exited: noticed, or, where the spawner can tell, asked of the OS now. Once
   * the group is empty its id may be reused, so nothing is signalled on the strength of a notice still
   * on its way.
   */
  private leaderGone(): boolean {
    return this.leaderExited || (this.child?.hasExited?.() ?? false);
  }

  /** Signals the group; `atLeaderExit` is the one signal sent as the leader's exit is handled. */
  private signalGroup(signal: SignalName, atLeaderExit = false): void {
    if (atLeaderExit ? this.leaderExited : this.leaderGone()) return;
    const pid = this.child?.pid;
    if (pid === undefined || pid <= 0) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // ESRCH: the group is already gone.
    }
  }

  private finish(end: Pick<ProcessExit, "status" | "exitCode" | "signal" | "error">): void {
    if (this.exitInfo !== undefined) return;
    clearTimeout(this.timeoutTimer);
    clearTimeout(this.escalationTimer);
    this.output.end();
    const offsets = this.output.offsets;
    this.exitInfo = {
      ...end,
      timedOut: this.timedOut,
      killed: this.killedOnRequest,
      startTime: this.startTime,
      endTime: new Date(),
      durationMs: performance.now() - this.startedAt,
      stdoutBytes: offsets.stdout,
      stderrBytes: offsets.stderr,
    };
    this.currentStatus = end.status;
    // The child's streams, closures and buffers are not needed for a record that only reports now.
    this.exitedPid = this.child?.pid ?? 0;
    this.child = undefined;
    this.resolveExited(this.exitInfo);
  }
}

function abortError(id: string, signal: AbortSignal): ProcessError {
  return new ProcessError(`write to stdin of process ${id} was cancelled`, "cancelled", { cause: signal.reason });
}

function throwIfAborted(id: string, signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw abortError(id, signal);
}
