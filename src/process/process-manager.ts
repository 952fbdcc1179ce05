import { randomUUID } from "node:crypto";
import {
  CommandLimitResolver,
  type CommandLimitPolicy,
  commitStartRecord,
  createBaseEnvironment,
  findProgramProblem,
  type ProcessSpec,
  reserveStartRecord,
  resolveCommand,
  spawnFailure,
  validateSessionId,
  validateSpec,
  workingDirectoryRefusal,
} from "./start/index.js";
import { ProcessError } from "./errors.js";
import {
  GroupLedger,
  type LostProcess,
  type ReapReport,
  ExpiryQueue,
  noteProcessStarted,
} from "./housekeeping/index.js";
import { Launcher, HelperStartError, LaunchError, spawnPipeChild, spawnPtyChild } from "./spawn/index.js";
import { defaultKillGracePeriodMs, ManagedProcess, type ProcessStatus } from "./managed-process.js";
import { defaultMemoryBudgetBytes, type MemoryBudget, type OutputReader } from "./output/index.js";
import { RetainedOutputBudget } from "./retained-output-budget.js";
import { defaultOutputHeadBytes, resolveRetention, type RetentionLimits } from "./retention.js";
import type { SignalName } from "./signals.js";
import { currentUser, rootIdentity, type UserIdentity } from "./user.js";
import { Workspace } from "./workspace.js";

/** Options for {@link ProcessManager.start} and {@link ProcessManager.startPinned}. */
export interface StartOptions {
  /**
   * The caller's signal: once it has fired, nothing is spawned (ProcessError CANCELED). Checked
   * after every await before the spawn; what happens to a process started just before it fires is
   * the caller's business.
   */
  signal?: AbortSignal;
}

/**
 * A process started by {@link ProcessManager.startPinned} for one caller who reads all of its
 * output (Exec), with the reader that does.
 */
export interface PinnedProcess {
  /** The record. */
  readonly process: ManagedProcess;
  /**
   * Reads every output byte from the first, in order: output this reader has not taken is never
   * dropped; past the record's capacity the process is paused instead.
   */
  readonly reader: OutputReader;
  /** Lets go of the reader (the caller left): from now on output is dropped, not held. Idempotent. */
  release(): void;
  /**
   * The caller has every byte and the exit: releases the reader and drops the retained output,
   * which nobody needs any more (the record stays, and later readers get a gap).
   */
  delivered(): void;
}

/** Where a page of {@link ProcessManager.listPage} starts and how long it is. */
export interface PageRequest {
  /** Only records created after the one with this {@link ManagedProcess.sequence}; all from the first when undefined. */
  afterSequence?: number;
  /** Most records in the page, at least 1. */
  size: number;
}

/** A page of records, oldest first. */
export interface ProcessPage {
  /** The records. */
  readonly processes: readonly ManagedProcess[];
  /** Whether more records match after the last of this page. */
  readonly more: boolean;
}

/** Options for {@link createProcessManager}. */
export interface ProcessManagerOptions {
  /** Directories commands may run in; the first is the default cwd. Default: the current directory. */
  workspaceRoots?: readonly string[];
  /**
   * Output bytes retained per process: the head of each stream and the tail together (see
   * `OutputRetention`), the most a request may ask for. Default 8 MiB.
   */
  outputCapacityBytes?: number;
  /**
   * The head of each stream a process retains when its request names none, in bytes: at most a
   * quarter of {@link outputCapacityBytes} is used; the tail is the rest. Default 64 KiB.
   */
  outputHeadBytes?: number;
  /** Maximum number of live processes; beyond it start is refused. Default 1024. */
  maxProcesses?: number;
  /** How long an exited record with auto-cleanup stays readable, in milliseconds. Default 60 s. */
  lingerMs?: number;
  /**
   * The base environment of children, under the variables naming their user (HOME, USER, LOGNAME,
   * SHELL) and the request's own. Default: {@link createBaseEnvironment}, never the daemon's own.
   */
  baseEnvironment?: Record<string, string>;
  /**
   * Run commands as this user, unless `sudo`: its uid, gid and supplementary groups (see
   * {@link Launcher}), with HOME, USER and LOGNAME set. Default: the daemon's own user.
   */
  runAs?: UserIdentity;
  /** Whether `sudo` may run commands as root (the daemon must be root). Default false. */
  allowSudo?: boolean;
  /** Spawns commands as the right user with forks capped. Default: `Launcher.create()`. */
  launcher?: Launcher;
  /**
   * State directory recording running process groups (see {@link GroupLedger}); groups left by a
   * daemon that died are killed when the manager is created. Default: none.
   */
  stateDirectory?: string;
  /**
   * The daemon's budget for what it holds on behalf of commands, in bytes: the output every record
   * retains, live or exited, and the stdin bytes accepted and not yet written, together. Past it the
   * oldest exited records' output is dropped first, then the largest live buffers are trimmed to a
   * common level (readers get a gap either way); what cannot be dropped is held back at its source:
   * stdin input waits for room (SendInput stops reading its stream), and an Exec whose caller has
   * not read its output pauses at its share of the budget instead of its whole capacity. Default
   * {@link defaultMemoryBudgetBytes} (a twentieth of the memory, from 128 MiB to 4 GiB).
   */
  maxRetainedBytes?: number;
  /** Told of every output read from a command, per stream (metrics). */
  onOutputBytes?: (stream: "stdout" | "stderr", bytes: number) => void;
  /** Where the manager reports what an operator must know (a state directory that cannot record). Default: nothing. */
  log?: (message: string) => void;
  /** Every command's own default limits and the caps of what one may ask for (see {@link CommandLimitPolicy}). */
  commandLimits?: CommandLimitPolicy;
}

/** Default output retained per process. */
export const defaultOutputCapacityBytes = 8 * 1024 * 1024;
/** Default linger time of exited records, in milliseconds. */
export const defaultLingerMs = 60_000;
/** Default maximum number of live processes. */
export const defaultMaxProcesses = 1024;

/** Filter for {@link ProcessManager.list}; empty fields match everything. */
export interface ProcessFilter {
  /** Only records of this session. */
  sessionId?: string;
  /** Only records in one of these statuses. */
  statuses?: readonly ProcessStatus[];
}

/**
 * ProcessManager starts processes and keeps their records: it validates specs, confines working
 * directories, enforces limits, expires exited records and kills everything on shutdown. It knows
 * nothing of RPC; refusals are {@link ProcessError}s.
 */
export class ProcessManager {
  private readonly processes = new Map<string, ManagedProcess>();
  /** The records of processes that run, by OS pid (see {@link getRunning}). */
  private readonly running = new Map<number, ManagedProcess>();
  /** The bounds and defaults of what a record retains of its output. */
  private readonly retentionLimits: RetentionLimits;
  private readonly maxProcesses: number;
  private readonly lingerMs: number;
  /** Exited records with autoCleanup, removed {@link lingerMs} after their exit. */
  private readonly lingering: ExpiryQueue;
  private readonly baseEnvironment: Record<string, string>;
  /** Spawns commands as the right user with their forks capped. */
  readonly launcher: Launcher;
  private readonly ledger?: GroupLedger;
  private readonly releases = new Set<Promise<void>>();
  private liveCount = 0;
  /** The {@link ManagedProcess.sequence} of the last record created. */
  private lastSequence = 0;
  private shuttingDown = false;
  /** Calls of {@link start} under way, awaited by {@link shutdown}. */
  private readonly starts = new Set<Promise<unknown>>();

  /** What every record's retained output and pending stdin count against (see {@link ProcessManagerOptions.maxRetainedBytes}). */
  readonly budget: MemoryBudget;
  /** Who gives up output when the budget is full, and which stdin data it refuses. */
  private readonly retained: RetainedOutputBudget;
  private readonly runAs?: UserIdentity;
  private readonly allowSudo: boolean;
  private readonly log?: (message: string) => void;
  private readonly onOutputBytes?: (stream: "stdout" | "stderr", bytes: number) => void;
  private daemonUser?: UserIdentity;
  /** Resolves each command's own limits against the daemon's caps and defaults (see {@link CommandLimitPolicy}). */
  readonly limits: CommandLimitResolver;

  /**
   * Use {@link createProcessManager}, which resolves the workspace roots. Only the fields of
   * {@link ProcessManagerOptions} are kept: a larger object passed in (the server's options, with
   * its token and TLS key) is not held.
   */
  constructor(
    readonly workspace: Workspace,
    options: ProcessManagerOptions = {},
  ) {
    this.retained = new RetainedOutputBudget({
      limitBytes: options.maxRetainedBytes ?? defaultMemoryBudgetBytes(),
      records: () => this.processes.values(),
    });
    this.budget = this.retained.budget;
    this.runAs = options.runAs;
    this.allowSudo = options.allowSudo ?? false;
    this.log = options.log;
    this.onOutputBytes = options.onOutputBytes;
    this.retentionLimits = {
      maxOutputBytes: options.outputCapacityBytes ?? defaultOutputCapacityBytes,
      defaultHeadBytes: options.outputHeadBytes ?? defaultOutputHeadBytes,
    };
    this.maxProcesses = options.maxProcesses ?? defaultMaxProcesses;
    this.lingerMs = options.lingerMs ?? defaultLingerMs;
    this.lingering = new ExpiryQueue(this.lingerMs, (id, sequence) => {
      const managed = this.processes.get(id);
      if (managed?.sequence === sequence) this.remove(managed);
    });
    this.baseEnvironment = options.baseEnvironment ?? createBaseEnvironment();
    this.launcher = options.launcher ?? Launcher.create();
    this.limits = new CommandLimitResolver(this.launcher, options.commandLimits);
    if (options.stateDirectory !== undefined) this.ledger = new GroupLedger(options.stateDirectory);
    const runAs = options.runAs;
    if (runAs !== undefined && runAs.uid !== process.getuid?.() && !this.launcher.canSwitchUser) {
      throw new Error(
        `cannot run commands as ${runAs.name}: the sandboxd-exec helper was not built (is a C compiler installed? run npm rebuild sandboxd)`,
      );
    }
  }

  /**
   * Kills the process groups a previous daemon left running in the state directory (see
   * {@link GroupLedger}); a no-op without one. Called by {@link createProcessManager}.
   */
  reapLeftovers(): ReapReport | undefined {
    this.reaped = this.ledger?.reapLeftovers();
    // Oldest first, as lists come; of two records of one id (two dead daemons), the later start wins.
    const lost = [...(this.reaped?.lost ?? [])].sort((a, b) => a.startedAtMs - b.startedAtMs);
    for (const each of lost) this.recordLost(each);
    return this.reaped;
  }

  /**
   * Keeps a record of a process a previous daemon started and this one found in the state directory:
   * exited with cause `unknown` (nobody saw how it ended), until a client removes it. A record of the
   * same id made before it is replaced, as a new start of that id replaces one.
   */
  private recordLost(lost: LostProcess): void {
    const managed = new ManagedProcess({
      description: {
        id: lost.processId,
        command: lost.command,
        args: lost.args,
        cwd: lost.cwd,
        sessionId: lost.sessionId,
        pty: lost.pty,
        acceptsInput: lost.acceptsInput,
        autoCleanup: false,
        timeoutMs: 0,
      },
      retention: resolveRetention(undefined, this.retentionLimits),
      sequence: ++this.lastSequence,
      budget: this.budget,
      ...(lost.startedAtMs > 0 ? { startTime: new Date(lost.startedAtMs) } : {}),
    });
    this.register(managed);
    managed.lose(
      lost.killed
        ? `started by a daemon that ended without seeing it end; still running at this daemon's start (group ${lost.pgid}), which killed it`
        : `started by a daemon that ended without seeing it end; already gone at this daemon's start: how it ended is not known`,
      lost.killed,
    );
  }

  /** What the last {@link reapLeftovers} did; undefined without a state directory. */
  reaped?: ReapReport;

  /** Number of processes that have not exited. */
  get liveProcessCount(): number {
    return this.liveCount;
  }

  /**
   * Starts a background process, whose record keeps the head of each stream and the tail of its
   * output (see `OutputRetention`; what lies between is dropped). Resolves once it runs, or once it
   * failed to start (status error, exit code 127 for a missing program, 126 for one that cannot be
   * executed). Throws a ProcessError for an invalid spec (a retention above the limit included), a
   * duplicate live id, a bad working directory, a refused sudo or too many processes.
   */
  async start(spec: ProcessSpec, options: StartOptions = {}): Promise<ManagedProcess> {
    return (await this.track(this.startProcess(spec, options, false))).process;
  }

  /**
   * Starts a process for one caller who reads all of its output (Exec), as {@link start} does, and
   * gives it the reader that does: output it has not read is never dropped, and the process is
   * paused while it lags by more than the capacity.
   */
  startPinned(spec: ProcessSpec, options: StartOptions = {}): Promise<PinnedProcess> {
    return this.track(this.startProcess(spec, options, true)) as Promise<PinnedProcess>;
  }

  /** Counts a start under way until it settles, for {@link shutdown}. */
  private track<T>(started: Promise<T>): Promise<T> {
    const settled = started.then(
      () => {},
      () => {},
    );
    this.starts.add(settled);
    void settled.then(() => this.starts.delete(settled));
    return started;
  }

  private async startProcess(
    spec: ProcessSpec,
    options: StartOptions,
    pinned: boolean,
  ): Promise<{ process: ManagedProcess } | PinnedProcess> {
    this.checkAdmission(options.signal);
    validateSpec(spec);
    const retention = resolveRetention(spec.retention, this.retentionLimits);
    const limits = this.limits.resolve(spec.limits ?? {});
    this.retained.checkInputFits(spec.stdinData?.length ?? 0);
    const id = spec.processId || randomUUID();
    this.checkRoom(id);
    if (spec.sudo && !this.allowSudo) throw new ProcessError("sudo is not allowed by this daemon", "SUDO_NOT_ALLOWED");
    if (spec.sudo && process.getuid?.() !== 0)
      throw new ProcessError("sudo needs the daemon to run as root", "SUDO_NOT_ALLOWED");
    const cwd = await this.workspace.resolve(spec.cwd ?? "");
    // Node hands a request to its handler, and runs the handler's promise chain, in the middle of
    // reading a packet: a reset that follows the request in the same packet is read only after that.
    // One turn of the loop lets it arrive before anything is spawned.
    if (options.signal !== undefined) await new Promise((resolve) => setImmediate(resolve));
    // Checked again after the await: shutdown may have begun, the caller may have gone, and other
    // starts may have taken the id or the last slots meanwhile. From here to register nothing awaits.
    this.checkAdmission(options.signal);
    this.checkRoom(id);
    this.retained.checkInputFits(spec.stdinData?.length ?? 0);
    const command = resolveCommand(spec, {
      id,
      cwd,
      identity: spec.sudo ? rootIdentity : this.runAs,
      ownUser: this.ownUser(),
      baseEnvironment: this.baseEnvironment,
    });
    let reservation = reserveStartRecord(this.ledger, this.log);
    const managed = new ManagedProcess({
      description: command.description,
      retention,
      sequence: ++this.lastSequence,
      budget: this.budget,
    });
    // Before the spawn: the reader misses nothing.
    const started = pinned ? this.pinned(managed) : { process: managed };
    this.register(managed);

    const { file, env } = command;
    const missing = command.shell || command.found ? undefined : findProgramProblem(file, env.PATH ?? "", cwd);
    if (missing !== undefined) {
      reservation?.cancel();
      managed.failToStart({ stage: "exec", errno: missing.errno, message: missing.message }, missing.exitCode);
      return started;
    }
    let plan;
    try {
      plan = this.launcher.plan(
        {
          file,
          args: command.argv,
          env,
          cwd,
          pty: command.pty !== undefined,
          cwdIsRoot: this.workspace.roots.includes(cwd),
          limits,
        },
        command.identity,
      );
    } catch (cause) {
      reservation?.cancel();
      const stage = cause instanceof LaunchError ? cause.stage : "limits";
      const errno = cause instanceof LaunchError ? cause.code : undefined;
      managed.failToStart({ stage, errno, message: `could not limit ${file}: ${(cause as Error).message}` }, 126);
      return started;
    }
    const childOptions = {
      file: plan.file,
      args: plan.args,
      cwd: plan.cwd,
      env: plan.env,
      stdin: command.stdin.acceptsInput,
      statusFd: plan.statusFd,
      joinCgroups: plan.joinCgroups,
    };
    const counted = this.onOutputBytes;
    try {
      const child = await managed.spawn((toRecord) => {
        const onOutput =
          counted === undefined
            ? toRecord
            : (stream: "stdout" | "stderr", data: Uint8Array) => {
                counted(stream, data.length);
                toRecord(stream, data);
              };
        return command.pty
          ? spawnPtyChild({ ...childOptions, ...command.pty, onOutput })
          : spawnPipeChild({ ...childOptions, onOutput });
      }, plan);
      this.indexPid(managed, child.pid);
      if (reservation !== undefined)
        commitStartRecord(reservation, managed, child.pid, this.ledger!.directory, this.log);
      reservation = undefined;
      const released: Promise<void> = managed.exited
        .then(() => {
          this.ledger?.forget(child.pid);
          return plan.release();
        })
        .finally(() => this.releases.delete(released));
      this.releases.add(released);
    } catch (cause) {
      reservation?.cancel();
      void plan.release();
      const refusal = cause instanceof HelperStartError ? workingDirectoryRefusal(cause, spec.cwd || cwd) : undefined;
      if (refusal !== undefined) {
        // Refused like a working directory found bad before the start: no record is left behind.
        managed.failToStart({ stage: "cwd", errno: (cause as HelperStartError).code, message: refusal.message }, 126);
        this.remove(managed);
        throw refusal;
      }
      managed.failToStart(spawnFailure(cause, file), (cause as NodeJS.ErrnoException).code === "ENOENT" ? 127 : 126);
      return started;
    }
    if (command.stdinData.length > 0) {
      // Counted, not checked again: checkInputFits made room for it before the spawn.
      void managed
        .writeReceived(command.stdinData)
        .then(() => (command.stdin.closeAfterData ? managed.closeInput() : undefined))
        .catch(() => {});
    }
    return started;
  }

  /** The name of the user a command runs as: root with sudo, the `runAs` user, or the daemon's own. */
  commandUser(sudo: boolean): string {
    if (sudo) return "root";
    return (this.runAs ?? this.ownUser()).name;
  }

  /** The daemon's own user, whom commands run as without `runAs` or `sudo`; looked up once. */
  private ownUser(): UserIdentity {
    return (this.daemonUser ??= currentUser());
  }

  /** Returns a record, or throws a ProcessError (PROCESS_NOT_FOUND). */
  get(id: string): ManagedProcess {
    const managed = this.processes.get(id);
    if (managed === undefined)
      throw new ProcessError(`process not found: ${id}`, "PROCESS_NOT_FOUND", { metadata: { process_id: id } });
    return managed;
  }

  /**
   * Returns the record of the running process whose OS pid (its process group's id) is `pid`, as
   * KEP-539.2's process service names processes; throws a ProcessError (PROCESS_NOT_FOUND) when no
   * process of this manager with that pid runs (an exited one included).
   */
  getRunning(pid: number): ManagedProcess {
    const managed = this.running.get(pid);
    if (managed === undefined || managed.exit !== undefined) {
      throw new ProcessError(`no running process has pid ${pid}`, "PROCESS_NOT_FOUND", {
        metadata: { pid: String(pid) },
      });
    }
    return managed;
  }

  /** Lists records, oldest first (in the order they were created: see {@link ManagedProcess.sequence}). */
  list(filter: ProcessFilter = {}): ManagedProcess[] {
    return this.listPage(filter, { size: Number.MAX_SAFE_INTEGER }).processes as ManagedProcess[];
  }

  /**
   * Lists one page of records, oldest first: at most `page.size` of those created after
   * `page.afterSequence` that match the filter, and whether more follow.
   */
  listPage(filter: ProcessFilter, page: PageRequest): ProcessPage {
    validateSessionId(filter.sessionId);
    const statuses = filter.statuses?.length ? new Set(filter.statuses) : undefined;
    const after = page.afterSequence ?? 0;
    const processes: ManagedProcess[] = [];
    // Records are kept in creation order (a replaced id is deleted, then added anew).
    for (const managed of this.processes.values()) {
      if (managed.sequence <= after) continue;
      if (filter.sessionId && managed.description.sessionId !== filter.sessionId) continue;
      if (statuses !== undefined && !statuses.has(managed.status)) continue;
      if (processes.length === page.size) return { processes, more: true };
      processes.push(managed);
    }
    return { processes, more: false };
  }

  /** Signals every live process (of one session, when given); returns how many were signalled. */
  killAll(options: { sessionId?: string; signal?: SignalName; gracePeriodMs?: number } = {}): number {
    let count = 0;
    for (const managed of this.list({ sessionId: options.sessionId })) {
      if (managed.kill(options.signal ?? "SIGTERM", options.gracePeriodMs ?? defaultKillGracePeriodMs, "kill_all"))
        count++;
    }
    return count;
  }

  /** Removes exited records (of one session, and only those of `processIds`, when given) at once; returns how many. */
  cleanup(options: { sessionId?: string; processIds?: readonly string[] } = {}): number {
    let count = 0;
    const only =
      options.processIds !== undefined && options.processIds.length > 0 ? new Set(options.processIds) : undefined;
    for (const managed of this.list({ sessionId: options.sessionId })) {
      if (only !== undefined && !only.has(managed.id)) continue;
      if (managed.exit !== undefined) {
        this.remove(managed);
        count++;
      }
    }
    return count;
  }

  /**
   * Refuses new processes, waits for the starts under way, sends SIGTERM to every process group,
   * SIGKILL after `gracePeriodMs`, and resolves once every process has exited.
   */
  async shutdown(gracePeriodMs = 2000): Promise<void> {
    this.shuttingDown = true;
    // A start past its last check registers its record and spawns: kill that child too.
    await Promise.all(this.starts);
    const live = [...this.processes.values()].filter((managed) => managed.exit === undefined);
    for (const managed of live) managed.kill("SIGTERM", gracePeriodMs, "daemon_shutdown");
    await Promise.all(live.map((managed) => managed.exited));
    await Promise.all(this.releases);
    this.launcher.close();
    this.lingering.clear();
  }

  /**
   * Refuses a start the daemon cannot take now: SHUTTING_DOWN once shutdown began, CANCELED once the
   * caller's signal fired. Checked before the start's first await and again after its last.
   */
  private checkAdmission(signal: AbortSignal | undefined): void {
    if (this.shuttingDown) throw new ProcessError("the daemon is shutting down", "SHUTTING_DOWN");
    if (signal?.aborted)
      throw new ProcessError("the call was cancelled before the command started", "CANCELED", { cause: signal.reason });
  }

  /** Refuses an id a live process has (PROCESS_ALREADY_EXISTS) and a process past the limit (LIMIT_EXCEEDED). */
  private checkRoom(id: string): void {
    const existing = this.processes.get(id);
    if (existing !== undefined && existing.exit === undefined) {
      throw new ProcessError(`process already exists: ${id}`, "PROCESS_ALREADY_EXISTS", {
        metadata: { process_id: id },
      });
    }
    if (this.liveCount >= this.maxProcesses) {
      throw new ProcessError(
        `too many processes: the limit of ${this.maxProcesses} live processes is reached`,
        "LIMIT_EXCEEDED",
        {
          metadata: { limit: "max-processes", value: String(this.maxProcesses) },
        },
      );
    }
  }

  /** Indexes a record that runs by its pid until it exits (a later process given the same pid replaces it). */
  private indexPid(managed: ManagedProcess, pid: number): void {
    this.running.set(pid, managed);
    void managed.exited.then(() => {
      if (this.running.get(pid) === managed) this.running.delete(pid);
    });
  }

  /** Pins a reader on a new record's output, with the ways to let go of it. */
  private pinned(managed: ManagedProcess): PinnedProcess {
    const pin = managed.pinReader(() => {
      if (managed.exit !== undefined && this.processes.get(managed.id) === managed)
        this.retained.dropDelivered(managed);
    });
    return { process: managed, reader: pin.reader, release: pin.release, delivered: pin.delivered };
  }

  private register(managed: ManagedProcess): void {
    const previous = this.processes.get(managed.id);
    if (previous !== undefined) this.remove(previous);
    this.processes.set(managed.id, managed);
    this.liveCount++;
    noteProcessStarted();
    void managed.exited.then(() => {
      this.liveCount--;
      if (this.processes.get(managed.id) === managed) this.retained.exited(managed);
      if (!managed.description.autoCleanup || this.processes.get(managed.id) !== managed) return;
      this.lingering.add(managed.id, managed.sequence);
    });
  }

  private remove(managed: ManagedProcess): void {
    if (this.processes.get(managed.id) !== managed) return;
    this.processes.delete(managed.id);
    this.retained.removed(managed);
  }
}

/** Creates a process manager, resolving its workspace roots (which must exist). */
export async function createProcessManager(options: ProcessManagerOptions = {}): Promise<ProcessManager> {
  const workspace = await Workspace.create(options.workspaceRoots ?? [process.cwd()]);
  const manager = new ProcessManager(workspace, options);
  manager.reapLeftovers();
  return manager;
}
