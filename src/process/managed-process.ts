import { ProcessError } from "./errors.js";
import type { SpawnedChild } from "./child.js";
import { OutputBuffer, type OutputReader, type OutputStreamName } from "./output-buffer.js";
import type { SignalName } from "./signals.js";

/** Lifecycle state of a process, as in seed 000. */
export type ProcessStatus = "starting" | "running" | "completed" | "failed" | "killed" | "error";

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
  /** Killed on request (kill, cancel, shutdown). */
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
  private currentStatus: ProcessStatus = "starting";
  private exitInfo?: ProcessExit;
  private readonly startedAt = performance.now();
  private killedOnRequest = false;
  private timedOut = false;
  private inputClosed = false;
  private writtenBytes = 0;
  private writeChain: Promise<void> = Promise.resolve();
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
  }

  /** Current status. */
  get status(): ProcessStatus {
    return this.currentStatus;
  }

  /** OS pid (and process group id), or 0 when it never started. */
  get pid(): number {
    return this.child?.pid ?? 0;
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
    if (this.timeoutMs > 0) {
      this.timeoutTimer = setTimeout(() => {
        this.timedOut = true;
        this.signalGroup("SIGKILL");
      }, this.timeoutMs);
    }
    void child.finished.then((exit) => {
      // Whatever the leader left behind in its group goes with it: nothing runs unaccounted.
      this.signalGroup("SIGKILL");
      this.finish({
        status: exit.signal !== null ? "killed" : exit.code === 0 ? "completed" : "failed",
        exitCode: exit.code,
        signal: exit.signal,
      });
    });
  }

  /** Records that the process could not start (status error, `exitCode` as a shell gives it). @internal */
  failToStart(error: string, exitCode: number): void {
    this.finish({ status: "error", exitCode, signal: null, error });
  }

  /**
   * Sends `signal` to the whole process group. With `gracePeriodMs` >= 0 the group is sent SIGKILL
   * if the process is still running that many milliseconds later. Returns false when it had
   * already exited.
   */
  kill(signal: SignalName = "SIGTERM", gracePeriodMs = 5000): boolean {
    if (this.exitInfo !== undefined || this.child === undefined) return false;
    this.killedOnRequest = true;
    this.signalGroup(signal);
    if (gracePeriodMs >= 0 && signal !== "SIGKILL" && this.escalationTimer === undefined) {
      this.escalationTimer = setTimeout(() => this.signalGroup("SIGKILL"), gracePeriodMs);
    }
    return true;
  }

  /** Sends a signal to the process group without counting it as a kill (SendInput's signals). */
  signal(signal: SignalName): void {
    if (this.exitInfo !== undefined) {
      throw new ProcessError(`process has exited: ${this.id}`, "failed-precondition");
    }
    this.signalGroup(signal);
  }

  /**
   * Writes bytes to stdin, in call order. Resolves with the total bytes written. Throws a
   * ProcessError ("failed-precondition") when the process has no stdin, stdin was closed, or it
   * has exited; a write racing the exit (EPIPE) is reported the same way, never as a crash.
   */
  async write(data: Uint8Array): Promise<number> {
    this.assertInputOpen();
    const child = this.child!;
    const result = this.writeChain.then(async () => {
      this.assertInputOpen();
      try {
        await child.write(data);
      } catch (cause) {
        throw new ProcessError(`stdin of process ${this.id} is closed`, "failed-precondition", { cause });
      }
      this.writtenBytes += data.length;
      return this.writtenBytes;
    });
    this.writeChain = result.then(
      () => {},
      () => {},
    );
    return result;
  }

  /** Closes stdin after pending writes. Closing twice is a no-op. */
  async closeInput(): Promise<void> {
    if (!this.stdin) throw new ProcessError(`process ${this.id} has no stdin`, "failed-precondition");
    if (this.inputClosed || this.exitInfo !== undefined) return;
    this.inputClosed = true;
    await this.writeChain;
    this.child?.closeInput();
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

  private signalGroup(signal: SignalName): void {
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
    this.resolveExited(this.exitInfo);
  }
}
