import { ProcessError } from "./errors.js";
import { ProcessStdin, processNotRunning } from "./process-stdin.js";
import type { SpawnedChild } from "./spawn/index.js";
import type { ResourceUsage } from "./cgroups/index.js";
import {
  MemoryBudget,
  OutputBuffer,
  type OutputGap,
  type OutputReader,
  type OutputStreamName,
  type StreamOffsets,
} from "./output/index.js";
import type { SignalName } from "./signals.js";
import type { OutputRetention } from "./retention.js";
import type { ProcessStatus } from "../shared/process-status.js";
import {
  classifyExit,
  type ExitCause,
  type KillOrigin,
  type KillReason,
  type StartFailure,
  type StartStage,
} from "./exit-cause.js";

export type { ProcessStatus };

/** Stands in for a promise's resolving function once it was called. */
const settled = (): void => {};

/** Milliseconds between a kill's signal and the SIGKILL that follows when the process is still running. */
export const defaultKillGracePeriodMs = 5000;

/** How a process ended. */
export interface ProcessExit {
  /**
   * completed (code 0), failed (non-zero), killed (by a signal) or error (never started). A process a
   * previous daemon lost (cause `unknown`): killed when this daemon killed what was left, failed when
   * it was gone already.
   */
  readonly status: Exclude<ProcessStatus, "starting" | "running">;
  /** Exit code, or null when a signal ended it or it is not known. 127 when the program was not found. */
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
  /**
   * Run time in milliseconds, with sub-millisecond precision. For a process a previous daemon lost,
   * from its recorded start to this daemon's start, the time between included.
   */
  readonly durationMs: number;
  /** Total bytes written to stdout. */
  readonly stdoutBytes: number;
  /** Total bytes written to stderr. */
  readonly stderrBytes: number;
  /** Why it could not start, for status error; what is known of it, for cause `unknown`. */
  readonly error?: string;
  /** Why it ended (see {@link classifyExit}); `status` and the fields above agree with it. */
  readonly cause: ExitCause;
  /** For cause `killed_on_request`: what asked for the kill. */
  readonly killOrigin?: KillOrigin;
  /** For cause `start_failed`: the step of the start that failed. */
  readonly startStage?: StartStage;
  /** For cause `start_failed`: the errno name the step failed with, when it had one. */
  readonly errno?: string;
  /**
   * What its whole process tree used, read from its own cgroups as it ended; undefined where it has
   * none (no writable cgroups here, or it never started). A figure left out is unknown.
   */
  readonly usage?: ResourceUsage;
}

/**
 * What only the command's surroundings know about it: asked about its end once its leader has
 * exited and before its record says how it ended (its cgroups are still there then), and, while it
 * runs, for what it uses and to kill its whole tree.
 */
export interface ExitProbe {
  /**
   * Whether the kernel killed a task of the command for memory: the oom_kill count of the command's
   * own memory cgroup rose. Undefined where that cannot be told; never a guess from SIGKILL.
   */
  killedForMemory?(): boolean | undefined;
  /**
   * What the command's whole process tree has used so far, from its own cgroups (`live` also reads
   * the memory in use now); undefined where it has none.
   */
  readUsage?(live?: boolean): ResourceUsage | undefined;
  /** Kills every process of the command's tree at once (double-forked ones included), where it has cgroups of its own. */
  killTree?(): void;
}

/** The fixed facts about a process, known when it is created. */
export interface ProcessDescription {
  /** The process id: client-chosen or a UUID. */
  readonly id: string;
  /** The command as given: a shell command line, or the program when `args` is not empty. */
  readonly command: string;
  /** The program's arguments (argv form); empty for a shell command line. */
  readonly args: readonly string[];
  /** The resolved working directory. */
  readonly cwd: string;
  /** The session it belongs to; empty for none. */
  readonly sessionId: string;
  /** Whether it runs in a PTY. */
  readonly pty: boolean;
  /** Whether it was given a stdin to write to (see `planStdin`): a pipe or its PTY, not /dev/null. */
  readonly acceptsInput: boolean;
  /** Whether the record is removed automatically, a linger time after the exit. */
  readonly autoCleanup: boolean;
  /** Time limit in milliseconds; 0 for none. */
  readonly timeoutMs: number;
}

/**
 * Life is where a process is, as one value (as connect-node's Http2SessionManager keeps its state), so
 * that what exists in each stage is what the type says:
 *
 * - `starting`: the record exists, nothing runs yet. `pendingKill` is the strongest kill asked meanwhile,
 *   sent as soon as it runs.
 * - `running`: the child runs. `killReason` says why a kill was sent, `timedOut` that the time limit fired;
 *   the timeout and a kill's escalation to SIGKILL are armed here.
 * - `draining`: the leader has exited. Its group is not signalled again (its id may be reused by an
 *   unrelated process); the output drains and the accepted writes settle.
 * - `exited`: final, with the exit and the pid the child had (0 when it never started).
 */
type Life =
  | {
      readonly t: "starting";
      pendingKill?: { readonly signal: SignalName; readonly gracePeriodMs: number; readonly reason: KillReason };
    }
  | {
      readonly t: "running";
      readonly child: SpawnedChild;
      readonly probe: ExitProbe | undefined;
      /** Why the first kill was sent; undefined while none was. */
      killReason?: KillReason;
      timedOut: boolean;
      timeoutTimer?: NodeJS.Timeout;
      escalationTimer?: NodeJS.Timeout;
    }
  | {
      readonly t: "draining";
      readonly child: SpawnedChild;
      readonly probe: ExitProbe | undefined;
      readonly killReason: KillReason | undefined;
      readonly timedOut: boolean;
    }
  | { readonly t: "exited"; readonly exit: ProcessExit; readonly pid: number };

/** Options for creating a {@link ManagedProcess}. */
export interface ManagedProcessOptions {
  /** What the process is. */
  description: ProcessDescription;
  /** How much of its output it retains: the head of each stream and the tail. */
  retention: OutputRetention;
  /** Its place in the order records were created in (see {@link ManagedProcess.sequence}). */
  sequence: number;
  /**
   * The budget its retained output and pending stdin bytes count against, shared with the other
   * records (see {@link MemoryBudget}). Default: one of its own without a limit.
   */
  budget?: MemoryBudget;
  /** When it started; default now. Only a record of a process started before it (see {@link ManagedProcess.lose}) says otherwise. */
  startTime?: Date;
}

/**
 * ManagedProcess is the daemon's record of one process: its description, status, retained output,
 * stdin and exit. It owns the child's process group: kill, timeout and exit all signal the group.
 */
export class ManagedProcess {
  /** The fixed facts: id, command, working directory, session, PTY, stdin, cleanup, timeout. */
  readonly description: ProcessDescription;
  /**
   * Its place in the order records were created in, unique within a manager: lists come in this
   * order, and a page of a list ends at one.
   */
  readonly sequence: number;
  /**
   * When the process started, to the millisecond: the record's creation, or for a process a previous
   * daemon lost, the start that daemon recorded.
   */
  readonly startTime: Date;
  /** Resolves with the exit once the process has exited and all of its output is in. */
  readonly exited: Promise<ProcessExit>;
  /** How much of its output it retains (see {@link OutputRetention}). */
  readonly retention: OutputRetention;

  /** Retained output of both streams. */
  private readonly output: OutputBuffer;
  /** What the retained output and the pending stdin bytes count against. */
  private readonly budget: MemoryBudget;
  /** The reader of the one caller who reads every byte (Exec); see {@link pinReader}. */
  private pinned?: OutputReader;
  /** Where the process is: see {@link Life}. */
  private life: Life = { t: "starting" };
  private readonly startedAt: number;
  /** Its input: writes queued behind the start, the end of input, resizes. */
  private readonly stdin: ProcessStdin;
  /** Signals sent through {@link signal} (SendInput's), for the exit's cause; created at the first. */
  private inputSignals?: Set<string>;
  /** Why the start failed, once it did (a process stopped as it started included). */
  private startFailure?: StartFailure;
  private resolveExited!: (exit: ProcessExit) => void;

  /** Creates a record in status starting; {@link attach} or {@link failToStart} follows. */
  constructor(options: ManagedProcessOptions) {
    this.description = options.description;
    this.sequence = options.sequence;
    this.startTime = options.startTime ?? new Date();
    this.startedAt =
      performance.now() - (options.startTime === undefined ? 0 : Date.now() - options.startTime.getTime());
    this.budget = options.budget ?? new MemoryBudget({ limitBytes: Infinity });
    this.retention = options.retention;
    this.output = new OutputBuffer({
      capacityBytes: options.retention.tailBytes,
      headBytes: options.retention.headBytes,
      onBackpressure: (paused) => (paused ? this.child?.pauseOutput() : this.child?.resumeOutput()),
      budget: this.budget,
    });
    this.exited = new Promise((resolve) => (this.resolveExited = resolve));
    this.stdin = new ProcessStdin(
      {
        id: this.description.id,
        acceptsInput: this.description.acceptsInput,
        pty: this.description.pty,
        runningChild: () => (this.life.t === "running" ? this.life.child : undefined),
        hasExited: () => this.life.t === "exited",
        leaderGone: () => this.leaderGone(),
      },
      this.budget,
    );
  }

  /** The process id (its description's). */
  get id(): string {
    return this.description.id;
  }

  /** Current status. */
  get status(): ProcessStatus {
    switch (this.life.t) {
      case "starting":
        return "starting";
      case "running":
      case "draining":
        return "running";
      case "exited":
        return this.life.exit.status;
    }
  }

  /** OS pid (and process group id), or 0 when it never started. */
  get pid(): number {
    return this.life.t === "exited" ? this.life.pid : (this.child?.pid ?? 0);
  }

  /** How it ended; undefined while running. */
  get exit(): ProcessExit | undefined {
    return this.life.t === "exited" ? this.life.exit : undefined;
  }

  /** Total bytes written to stdin so far. */
  get bytesWritten(): number {
    return this.stdin.bytesWritten;
  }

  /** Whether stdin has been closed (or was never open). */
  get isInputClosed(): boolean {
    return !this.description.acceptsInput || this.stdin.isClosed || this.life.t === "exited";
  }

  /** Bytes written so far per stream: the offset the next byte of each will have. */
  get outputOffsets(): Readonly<StreamOffsets> {
    return this.output.offsets;
  }

  /**
   * Offset of the first byte of the retained run that ends at the newest, per stream: the tail's
   * start when a gap lies before it (see {@link snapshotHead}), else the first retained byte.
   */
  get retainedFrom(): Readonly<StreamOffsets> {
    return this.output.retainedFrom;
  }

  /** The output dropped so far: at most one gap per stream, between its head and its tail, stdout first. */
  droppedOutput(): OutputGap[] {
    return this.output.dropped();
  }

  /** Bytes of output retained now, both streams. */
  get retainedBytes(): number {
    return this.output.retainedBytes;
  }

  /** Whether all of the output is in: the process has exited and its streams are drained. */
  get outputEnded(): boolean {
    return this.output.isEnded;
  }

  /**
   * Creates a reader of the output from the given offsets (0 for everything retained); output it
   * asks for that was dropped comes as a gap. Throws a ProcessError (OFFSET_OUT_OF_RANGE) for an
   * offset beyond the bytes written so far.
   */
  readOutput(from: Partial<StreamOffsets> = {}): OutputReader {
    for (const stream of ["stdout", "stderr"] as const) {
      const offset = from[stream] ?? 0;
      const written = this.output.offsets[stream];
      if (offset > written) {
        throw new ProcessError(
          `${stream}_offset ${offset} is beyond the ${written} bytes written so far`,
          "OFFSET_OUT_OF_RANGE",
          {
            metadata: { field: `${stream}_offset`, offset: String(offset), written: String(written) },
          },
        );
      }
    }
    return this.output.createReader(from);
  }

  /** Copies the retained output of one stream from {@link retainedFrom} to the newest byte. */
  snapshotOutput(stream: OutputStreamName): Uint8Array {
    return this.output.snapshot(stream);
  }

  /** Copies the head of one stream that a gap separates from {@link snapshotOutput}; empty when none does. */
  snapshotHead(stream: OutputStreamName): Uint8Array {
    return this.output.headSnapshot(stream);
  }

  /**
   * Pins the reader of the one caller who reads every byte (Exec): its unread output is never dropped,
   * the process is paused instead. Called before the spawn, so it misses nothing. `release` lets go of
   * it (the caller left: output is dropped, not held, from now on); `delivered` also tells `onDelivered`
   * that the caller has every byte and the exit. Both are idempotent. @internal
   */
  pinReader(onDelivered: () => void): { reader: OutputReader; release(): void; delivered(): void } {
    const reader = this.output.createReader({}, { pinned: true });
    this.pinned = reader;
    const release = () => {
      if (this.pinned !== reader) return;
      this.output.unpin(reader);
      this.pinned = undefined;
    };
    return {
      reader,
      release,
      delivered: () => {
        release();
        onDelivered();
      },
    };
  }

  /**
   * Drops every retained output byte the pinned reader has read (all of them without one); readers
   * that ask for them get a gap. Returns the bytes released. @internal
   */
  discardRetainedOutput(): number {
    return this.output.discardRetained();
  }

  /**
   * Drops the oldest retained output until at most `bytes` are retained (what the pinned reader has
   * not read stays); readers that ask for it get a gap. Returns the bytes released. @internal
   */
  trimRetainedOutput(bytes: number): number {
    return this.output.trimTo(bytes);
  }

  /**
   * The record goes: drops the retained output no pinned reader needs, and stops counting the rest
   * against the budget. Returns the bytes released. @internal
   */
  releaseOutput(): number {
    return this.output.leaveBudget();
  }

  /**
   * Starts the child: calls `spawn` with the function the child's output goes to (this record's
   * buffer), then takes ownership of the child it returns: status running, timeout armed, a kill
   * asked meanwhile sent, exit awaited. A failure of `spawn` is thrown as it is and the record stays
   * `starting`: the caller says why it could not start with {@link failToStart}. `probe` is asked,
   * once the leader has exited, what only the command's surroundings know of its end. @internal
   */
  async spawn(
    spawn: (onOutput: (stream: OutputStreamName, data: Uint8Array) => void) => SpawnedChild | Promise<SpawnedChild>,
    probe?: ExitProbe,
  ): Promise<SpawnedChild> {
    const child = await spawn((stream, data) => this.output.append(stream, data));
    this.attach(child, probe);
    return child;
  }

  /**
   * What the process's tree has used so far, read now from its cgroups (memory in use included);
   * its exit's usage once it has ended; undefined where it has no cgroups of its own.
   */
  readUsage(): ResourceUsage | undefined {
    const life = this.life;
    if (life.t === "exited") return life.exit.usage;
    if (life.t === "starting") return undefined;
    try {
      return life.probe?.readUsage?.(true);
    } catch {
      return undefined;
    }
  }

  /** Takes ownership of a spawned child: status running, timeout armed, exit awaited. */
  private attach(child: SpawnedChild, probe: ExitProbe | undefined): void {
    if (this.life.t !== "starting") return;
    const { pendingKill } = this.life;
    const running: Extract<Life, { t: "running" }> = { t: "running", child, probe, timedOut: false };
    this.life = running;
    this.stdin.started();
    if (this.description.timeoutMs > 0) {
      running.timeoutTimer = setTimeout(() => {
        running.timedOut = true;
        this.signalGroup("SIGKILL");
      }, this.description.timeoutMs);
    }
    if (pendingKill !== undefined) this.kill(pendingKill.signal, pendingKill.gracePeriodMs, pendingKill.reason);
    void child.exited.then(() => {
      if (this.life !== running) return;
      // Whatever the leader left behind in its group goes with it: nothing runs unaccounted. This
      // is the last signal: once the group is empty its id may be reused by an unrelated process,
      // so no timer or kill may signal it while the output drains.
      killGroup(child.pid, "SIGKILL");
      clearTimeout(running.timeoutTimer);
      clearTimeout(running.escalationTimer);
      this.life = { t: "draining", child, probe, killReason: running.killReason, timedOut: running.timedOut };
    });
    // A write still pending at the exit settles once the child stops it: none outlives the record.
    void child.finished.then(async (exit) => {
      await this.stdin.settled;
      this.finish({
        status: exit.signal !== null ? "killed" : exit.code === 0 ? "completed" : "failed",
        exitCode: exit.code,
        signal: exit.signal,
      });
    });
  }

  /**
   * Records that the process could not start: status error, `exitCode` as a shell gives it (127 for
   * a missing program, 126 otherwise), cause `start_failed` with the failure's stage and errno. @internal
   */
  failToStart(failure: StartFailure, exitCode: number): void {
    this.startFailure = failure;
    this.stdin.started();
    this.finish({ status: "error", exitCode, signal: null, error: failure.message });
  }

  /**
   * Ends a record of a process this daemon never ran: one a previous daemon started and lost (see
   * `GroupLedger`). Its exit says cause `unknown`, status `killed` when this daemon killed what was
   * left of it and `failed` when it was gone already, and `message` says what is known. @internal
   */
  lose(message: string, killed: boolean): void {
    if (this.life.t !== "starting") return;
    this.stdin.started();
    this.finish({
      status: killed ? "killed" : "failed",
      exitCode: null,
      signal: killed ? "SIGKILL" : null,
      error: message,
    });
  }

  /**
   * Stops a process that was spawned but must not run on (its group could not be recorded): kills
   * its group with SIGKILL, and its exit says cause `start_failed` with the failure's stage. @internal
   */
  abortStarted(failure: StartFailure): void {
    this.startFailure = failure;
    this.kill("SIGKILL", -1, "start_failed");
  }

  /**
   * Sends `signal` to the whole process group. With `gracePeriodMs` >= 0 the group is sent SIGKILL
   * if the process is still running that many milliseconds later. A kill of a process still
   * starting is sent as soon as it runs. `reason` says why, for the exit's cause: the first kill's
   * reason is the one its exit reports (default `kill_process`, KillProcess's). Returns false when
   * its leader had already exited.
   */
  kill(
    signal: SignalName = "SIGTERM",
    gracePeriodMs = defaultKillGracePeriodMs,
    reason: KillReason = "kill_process",
  ): boolean {
    const life = this.life;
    if (life.t === "starting") {
      // The strongest request wins: a later SIGTERM must not soften an earlier SIGKILL.
      if (life.pendingKill === undefined) life.pendingKill = { signal, gracePeriodMs, reason };
      else if (life.pendingKill.signal !== "SIGKILL")
        life.pendingKill = { signal, gracePeriodMs, reason: life.pendingKill.reason };
      return true;
    }
    if (life.t !== "running" || this.leaderGone()) return false;
    life.killReason ??= reason;
    this.signalGroup(signal);
    if (gracePeriodMs >= 0 && signal !== "SIGKILL" && life.escalationTimer === undefined) {
      life.escalationTimer = setTimeout(() => this.signalGroup("SIGKILL"), gracePeriodMs);
    }
    return true;
  }

  /**
   * Sends a signal to the process group without counting it as a kill (SendInput's signals). Throws
   * a ProcessError (PROCESS_NOT_RUNNING) once the process has exited.
   */
  signal(signal: SignalName): void {
    if (this.life.t === "draining" || this.life.t === "exited" || this.leaderGone()) throw processNotRunning(this.id);
    (this.inputSignals ??= new Set()).add(signal);
    this.signalGroup(signal);
  }

  /**
   * Checks that input may be sent to the process at all, as SendInput does when it opens: throws a
   * ProcessError, STDIN_NOT_OPEN when it was started without a stdin to write to, PROCESS_NOT_RUNNING
   * once it has exited. A closed stdin passes: signals and resizes still go through.
   */
  assertAcceptsInput(): void {
    this.stdin.assertAccepts();
  }

  /**
   * Writes bytes to stdin, in call order. Resolves with the total bytes written once these were
   * handed to the OS. Throws a ProcessError: STDIN_NOT_OPEN when the process has no stdin or stdin
   * was closed, PROCESS_NOT_RUNNING when it has exited (a write racing the exit, EPIPE, included,
   * never a crash); LIMIT_EXCEEDED when more than `maxPendingInputBytes` would be pending, or
   * when the daemon's budget cannot hold the bytes even once output was dropped for them (naming
   * `max-retained-bytes`); CANCELED when `signal` aborts first. An aborted write that had not reached the child yet is
   * dropped; one the child had already taken (a PTY or pipe writes what it took in order) still
   * counts in {@link bytesWritten} once it is written, as it then reaches the process.
   */
  async write(data: Uint8Array, signal?: AbortSignal): Promise<number> {
    return this.stdin.write(data, signal);
  }

  /**
   * Writes bytes already received (a SendInput message) as {@link write} does, but counts them as
   * pending even past `maxPendingInputBytes` or the daemon's budget: they are in memory
   * already, and refusing them would lose input. Their receiver reads nothing more while
   * {@link waitForInputRoom} waits, so each receiver is past the limits by at most one message.
   * Throws LIMIT_EXCEEDED at once for data that could never fit: larger than the pending limit, or
   * than the whole budget (naming `max-retained-bytes`).
   */
  async writeReceived(data: Uint8Array, signal?: AbortSignal): Promise<number> {
    return this.stdin.writeReceived(data, signal);
  }

  /**
   * Resolves once stdin has room again: fewer than `maxPendingInputBytes` pending, and the
   * daemon's budget has room for input (see `MemoryBudget.fitsInput`: half of it always); at once
   * when stdin is closed or the process has exited (what comes next fails on its own). Rejects with
   * a ProcessError (CANCELED) when `signal` aborts first. A SendInput call waits for it before it
   * reads its next message: backpressure reaches the client instead of the daemon buffering.
   */
  async waitForInputRoom(signal?: AbortSignal): Promise<void> {
    return this.stdin.waitForRoom(signal);
  }

  /**
   * Closes stdin: further writes are refused at once, and the end of input reaches the process
   * after the writes already accepted, or not at all when it exits first. Resolves without
   * waiting for those writes, which a process that does not read may hold forever. Closing twice
   * is a no-op; a process without stdin is a ProcessError (STDIN_NOT_OPEN).
   */
  async closeInput(): Promise<void> {
    this.stdin.close();
  }

  /**
   * Resizes the PTY once the writes accepted before have settled, in order with them. Resolves once
   * applied. Throws a ProcessError at once: INVALID_ARGUMENT (field `resize`) for a size outside
   * `ptySizeProblem`'s bounds, PTY_NOT_OPEN for a process without a PTY. A resize after the
   * exit is a no-op.
   */
  resize(cols: number, rows: number): Promise<void> {
    return this.stdin.resize(cols, rows);
  }

  /** The child while it runs or drains. */
  private get child(): SpawnedChild | undefined {
    return this.life.t === "running" || this.life.t === "draining" ? this.life.child : undefined;
  }

  /**
   * Whether the leader has exited: noticed (no longer `running`), or, where the spawner can tell,
   * asked of the OS now. Once the group is empty its id may be reused, so nothing is signalled on
   * the strength of a notice still on its way.
   */
  private leaderGone(): boolean {
    if (this.life.t !== "running") return this.life.t !== "starting";
    return this.life.child.hasExited?.() ?? false;
  }

  /**
   * Signals the group of a running child; nothing once its leader is gone. SIGKILL also goes to
   * every process of its tree through its cgroups, where it has its own: those that left the group
   * (`setsid`, double-forked daemons) included.
   */
  private signalGroup(signal: SignalName): void {
    if (this.life.t !== "running" || this.leaderGone()) return;
    killGroup(this.life.child.pid, signal);
    if (signal === "SIGKILL") this.life.probe?.killTree?.();
  }

  private finish(end: Pick<ProcessExit, "status" | "exitCode" | "signal" | "error">): void {
    const life = this.life;
    if (life.t === "exited") return;
    if (life.t === "running") {
      clearTimeout(life.timeoutTimer);
      clearTimeout(life.escalationTimer);
    }
    this.output.end();
    const offsets = this.output.offsets;
    const ran = life.t !== "starting";
    const killReason = ran ? life.killReason : undefined;
    const timedOut = ran && life.timedOut;
    // Read before the cgroups go (they are removed once the record has exited); the kernel's count of
    // kills for memory comes with the usage where there is one, in the same read.
    const usage = ran ? readUsageQuietly(life.probe) : undefined;
    const classified = classifyExit({
      leader: ran ? { code: end.exitCode, signal: end.signal } : undefined,
      startFailure: this.startFailure,
      timedOut,
      killReason,
      inputSignals: this.inputSignals,
      killedForMemory:
        usage?.oomKills !== undefined ? usage.oomKills > 0 : ran ? readKilledForMemory(life.probe) : undefined,
    });
    // Built field by field, never spread: V8 gave each record spread from `end` a hidden class of its own
    // (about 400 bytes a record that lingers).
    const exit: { -readonly [K in keyof ProcessExit]: ProcessExit[K] } = {
      status: end.status,
      exitCode: end.exitCode,
      signal: end.signal,
      timedOut,
      killed: killReason !== undefined,
      startTime: this.startTime,
      endTime: new Date(),
      durationMs: performance.now() - this.startedAt,
      stdoutBytes: offsets.stdout,
      stderrBytes: offsets.stderr,
      cause: classified.cause,
    };
    if (end.error !== undefined) exit.error = end.error;
    if (classified.killOrigin !== undefined) exit.killOrigin = classified.killOrigin;
    if (classified.startStage !== undefined) exit.startStage = classified.startStage;
    if (classified.errno !== undefined) exit.errno = classified.errno;
    if (usage !== undefined) exit.usage = usage;
    // The child's streams, closures and buffers are not needed for a record that only reports now.
    this.life = { t: "exited", exit, pid: life.t === "starting" ? 0 : life.child.pid };
    this.resolveExited(exit);
    // Resolving functions hold their promise's internals: a record that lingers keeps neither.
    this.resolveExited = settled;
    // Writers waiting for room look again, and find the process gone.
    this.budget.wake();
  }
}

/** Asks a probe what the command used; a probe that fails cannot tell. */
function readUsageQuietly(probe: ExitProbe | undefined): ResourceUsage | undefined {
  try {
    return probe?.readUsage?.();
  } catch {
    return undefined;
  }
}

/** Asks a probe whether the command was killed for memory; a probe that fails cannot tell. */
function readKilledForMemory(probe: ExitProbe | undefined): boolean | undefined {
  try {
    return probe?.killedForMemory?.();
  } catch {
    return undefined;
  }
}

/** Sends `signal` to process group `pid`; a group already gone (ESRCH) is no error. */
function killGroup(pid: number, signal: SignalName): void {
  if (pid <= 0) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}
