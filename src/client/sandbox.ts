import { randomBytes } from "node:crypto";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import type { CommandFinished } from "./command-finished.js";
import { CommandHandle, type CommandContext } from "./command-handle.js";
import { buildSpec, type CommandOptions, type SpecDefaults, type SpecInput } from "./command-spec.js";
import { isUnreachable, SandboxError, toSandboxError } from "./errors.js";
import { linkAbort, runExec, streamExec, type ExecEvent, type ExecOptions, type ExecResult, type PreparedExec, type StreamOptions } from "./exec.js";
import { Lifecycle, type SandboxStatus } from "./lifecycle.js";
import type { OutputOffsets } from "./output.js";
import { commandLine, statusToProto, type ProcessStatus } from "./process-record.js";
import { logEvents, type LogEvent, type ProcessOptions } from "./process-views.js";
import { createSandboxConnection, type SandboxConnection, type SandboxProtocol } from "./transport.js";

/** Options of a {@link Sandbox}. */
export interface SandboxOptions {
  /** Base URL of the daemon, such as `http://127.0.0.1:7007`. */
  baseUrl: string;
  /** Wire protocol: `"grpc"` (default) or `"connect"`, both over HTTP/2. */
  protocol?: SandboxProtocol;
  /** Bearer token, sent as `Authorization: Bearer <token>` on every call. */
  token?: string;
  /** Extra headers sent on every call. */
  headers?: Record<string, string>;
  /**
   * Advertise compressed responses as accepted (default true); see SandboxConnectionOptions. The
   * daemon never compresses its responses, so this only matters behind a proxy that does.
   */
  acceptCompression?: boolean;
  /** Largest request message sent; see SandboxConnectionOptions. Default 4 MiB, as the daemon's default. */
  maxMessageBytes?: number;
  /** Identifier of this sandbox; 12 random hex characters by default. */
  sandboxId?: string;
  /** Session of the commands this sandbox starts; the sandbox id by default. stop() kills its processes. */
  sessionId?: string;
  /**
   * Default time limit of waiting commands (exec, execStream, run, blocking runCommand) in
   * milliseconds; 30000 by default (seed 002's 30 s), 0 for none. Background processes have none
   * unless asked.
   */
  timeout?: number;
  /**
   * Allowed workspace directories on the sandbox's machine; the first is the default working
   * directory, and a `cwd` outside all of them is refused before any call. Empty by default: the
   * daemon's own first workspace root is the default and the daemon confines `cwd` either way.
   */
  workspace?: readonly string[];
  /** Encoding of text output; default `"utf-8"`. */
  encoding?: string;
  /** Milliseconds start() waits for the daemon to answer; 10000 by default. */
  connectTimeout?: number;
}

/** What {@link Sandbox.describe} returns (seed 002's keys, camel-cased, and the connection's). */
export interface SandboxDescription {
  /** The sandbox id. */
  sandboxId: string;
  /** Current lifecycle state. */
  status: SandboxStatus;
  /** Allowed workspace directories. */
  workspace: string[];
  /** Default time limit in milliseconds. */
  timeout: number;
  /** Session of its commands. */
  sessionId: string;
  /** The daemon's base URL. */
  baseUrl: string;
  /** The wire protocol. */
  protocol: SandboxProtocol;
}

/** Options of {@link Sandbox.run}. */
export interface RunOptions extends ProcessOptions {
  /** Wait for the exit and resolve with a CommandFinished (default true); false resolves with a live handle. */
  wait?: boolean;
  /** Aborting kills the command (and ends the wait). */
  signal?: AbortSignal;
}

/** Options of {@link Sandbox.runCommand} (seed 003). */
export interface RunCommandOptions {
  /** Working directory. */
  cwd?: string;
  /** Per-command environment variables. */
  env?: Record<string, string>;
  /** Run as root; refused with a SandboxError (PERMISSION_DENIED) unless the daemon allows it. */
  sudo?: boolean;
  /**
   * Time limit in milliseconds: the daemon SIGKILLs the process group on expiry and the command
   * finishes with exit code 137 (128 + SIGKILL). Blocking runs default to the sandbox's timeout.
   */
  timeoutMs?: number;
  /** Aborting cancels: a blocking run rejects with the reason, a detached command is killed; either way the process group dies. */
  signal?: AbortSignal;
  /** Return a live Command at once instead of waiting. */
  detached?: boolean;
  /** Text or bytes written to stdin, which is then closed; `true` keeps it open for sendInput (detached). */
  stdin?: boolean | string | Uint8Array;
  /** Run in a pseudo-terminal. */
  pty?: CommandOptions["pty"];
  /** Session id; the sandbox's by default. */
  sessionId?: string;
  /** Encoding of text output. */
  encoding?: string;
}

/** Seed 003's object form of runCommand: `{ cmd, args, ...options }`. */
export interface RunCommandParams extends RunCommandOptions {
  /** The program (or a shell command line when there are no args). */
  cmd: string;
  /** Its arguments (argv form, no shell). */
  args?: readonly string[];
}

/** Seed 003's live `Command`: a CommandHandle (wait(), logs(), kill(signal?)). */
export type Command = CommandHandle;

/** Options of {@link Sandbox.listProcesses}. */
export interface ListProcessesOptions {
  /** Every process on the daemon instead of only this sandbox's sessions. */
  all?: boolean;
  /** Only processes in one of these statuses. */
  statuses?: readonly ProcessStatus[];
}

/** Options of {@link Sandbox.close}. */
export interface CloseOptions {
  /** Kill the live processes of this sandbox's sessions first (default true). */
  killProcesses?: boolean;
}

/**
 * Sandbox is a client of one sandboxd daemon with seed 002's lifecycle: `init` until start(),
 * `running` while connected, `idle` after stop(), `error` when starting failed or the daemon could not be reached,
 * `closed` after close(). Only seed 002's transitions are allowed (SandboxError INVALID_TRANSITION
 * otherwise), and commands run only while `running` (SandboxError NOT_RUNNING).
 *
 * Commands belong to the sandbox's session: stop() and close() kill them. Waiting commands (exec,
 * execStream, run, blocking runCommand) go through Exec, so cancelling them, or losing this client,
 * kills them on the daemon; background processes (startProcess, detached runCommand, run with
 * `wait: false`) outlive their calls and are followed through resumable log streams.
 */
export class Sandbox implements AsyncDisposable {
  /** The sandbox id. */
  readonly sandboxId: string;
  /** Session of this sandbox's commands. */
  readonly sessionId: string;
  private readonly lifecycle = new Lifecycle();
  private connection?: SandboxConnection;
  private rpc?: Client<typeof SandboxService>;
  private readonly sessions = new Set<string>();
  private readonly handles = new Set<CommandHandle>();
  private readonly defaults: SpecDefaults;

  constructor(private readonly options: SandboxOptions) {
    this.sandboxId = options.sandboxId ?? randomBytes(6).toString("hex");
    this.sessionId = options.sessionId ?? this.sandboxId;
    this.sessions.add(this.sessionId);
    const timeout = options.timeout ?? 30_000;
    this.defaults = { sessionId: this.sessionId, timeout, workspace: [...(options.workspace ?? [])] };
  }

  /** Current lifecycle state. */
  get status(): SandboxStatus {
    return this.lifecycle.status;
  }

  /** A copy of the allowed workspace directories. */
  get workspace(): string[] {
    return [...this.defaults.workspace];
  }

  /** Default time limit of waiting commands, in milliseconds. */
  get timeout(): number {
    return this.defaults.timeout;
  }

  /** The generated, fully typed client, for the raw RPCs; only while running. */
  get client(): Client<typeof SandboxService> {
    this.lifecycle.assertRunning();
    return this.rpc!;
  }

  /** Describes the sandbox (seed 002's `describe()`). */
  describe(): SandboxDescription {
    return {
      sandboxId: this.sandboxId,
      status: this.status,
      workspace: this.workspace,
      timeout: this.timeout,
      sessionId: this.sessionId,
      baseUrl: this.options.baseUrl,
      protocol: this.options.protocol ?? "grpc",
    };
  }

  /**
   * Connects and checks that the daemon answers (and accepts the token): `init`, `idle` or `error`
   * to `running`. On failure the connection is released and the sandbox goes to `error` (from
   * `idle`; from `init`, where seed 002 allows no error, it stays `init`) and this throws.
   */
  async start(): Promise<void> {
    if (this.status === "running" || this.status === "closed") this.lifecycle.transition("running");
    const connection = createSandboxConnection(this.options);
    const rpc = createClient(SandboxService, connection.transport);
    try {
      await rpc.listProcesses({ sessionId: this.sessionId }, { timeoutMs: this.options.connectTimeout ?? 10_000 });
    } catch (error) {
      connection.close();
      if (this.status === "idle") this.lifecycle.transition("error");
      throw toSandboxError(error);
    }
    this.connection = connection;
    this.rpc = rpc;
    this.lifecycle.transition("running");
  }

  /**
   * Kills the processes of this sandbox's sessions, stops following them and releases the
   * connection: `running` to `idle`. start() may follow. If the daemon cannot be reached the
   * sandbox goes to `error` and this throws.
   */
  async stop(): Promise<void> {
    if (this.status !== "running") this.lifecycle.transition("idle");
    try {
      await this.killAllProcesses();
    } catch (error) {
      this.release();
      this.lifecycle.transition("error");
      throw error;
    }
    this.release();
    this.lifecycle.transition("idle");
  }

  /**
   * Closes the sandbox for good: kills its sessions' live processes (unless `killProcesses` is
   * false; failures to reach the daemon are ignored), releases the connection and goes to `closed`.
   * Closing a closed sandbox does nothing.
   */
  async close(options: CloseOptions = {}): Promise<void> {
    if (this.status === "closed") return;
    if (this.status === "running" && options.killProcesses !== false) {
      await this.killAllProcesses().catch(() => {});
    }
    this.release();
    this.lifecycle.transition("closed");
  }

  /** Closes the sandbox (see {@link close}); for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * Runs a command and waits for it (seeds 000 and 004): resolves with an {@link ExecResult}
   * whatever the exit code; rejects with a SandboxError when the daemon refuses the command or the
   * stream ends without an exit, and with `signal`'s reason when aborted (the command is killed).
   */
  async exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    return this.guard(async () => {
      const prepared = this.prepareExec(command, { ...options, stdinData: options.stdin });
      return runExec(this.context(), prepared, options);
    });
  }

  /**
   * Runs a command as an async iterable of {@link ExecEvent}s (seed 000): `start`, `stdout`/`stderr`
   * text, then `complete` with the result or `error`. Leaving the loop early kills the command.
   */
  async *execStream(command: string, options: StreamOptions = {}): AsyncGenerator<ExecEvent> {
    this.lifecycle.assertRunning();
    const prepared = this.prepareExec(command, { ...options, stdinData: options.stdin });
    yield* streamExec(this.context(), prepared, options);
  }

  /**
   * Runs a command (seed 001's `run`): with `wait: false` resolves at once with a live, resumable
   * {@link CommandHandle} of a background process; otherwise waits and resolves with its
   * {@link CommandFinished}.
   */
  run(command: string, options: RunOptions & { wait: false }): Promise<CommandHandle>;
  run(command: string, options?: RunOptions & { wait?: true }): Promise<CommandFinished>;
  async run(command: string, options: RunOptions = {}): Promise<CommandHandle | CommandFinished> {
    if (options.wait === false) {
      const handle = await this.startProcess(command, options);
      if (options.signal !== undefined) this.killOnAbort(handle, options.signal);
      return handle;
    }
    return this.guard(async () => {
      const handle = await this.execHandle(command, { ...options, stdinData: stdinData(options.stdin) }, options.signal);
      return raceSignal(handle.result, options.signal);
    });
  }

  /**
   * Runs a command as seed 003's `runCommand`: blocking resolves with a {@link CommandFinished}
   * (exitCode, stdout(), stderr()); `detached: true` resolves at once with a live {@link Command}
   * (wait(), logs(), kill()). `timeoutMs` SIGKILLs (exit code 137), `signal` cancels, `sudo` runs
   * as root where the daemon allows it and is a SandboxError with code PERMISSION_DENIED where not.
   */
  runCommand(cmd: string, args: readonly string[] | undefined, options: RunCommandOptions & { detached: true }): Promise<Command>;
  runCommand(cmd: string, args?: readonly string[], options?: RunCommandOptions & { detached?: false }): Promise<CommandFinished>;
  runCommand(params: RunCommandParams & { detached: true }): Promise<Command>;
  runCommand(params: RunCommandParams & { detached?: false }): Promise<CommandFinished>;
  async runCommand(
    first: string | RunCommandParams,
    args?: readonly string[],
    options: RunCommandOptions = {},
  ): Promise<Command | CommandFinished> {
    const params: RunCommandParams = typeof first === "string" ? { ...options, cmd: first, args } : first;
    const input: SpecInput & { signal?: AbortSignal } = {
      args: params.args,
      cwd: params.cwd,
      env: params.env,
      sudo: params.sudo,
      timeout: params.timeoutMs,
      pty: params.pty,
      sessionId: params.sessionId,
      encoding: params.encoding,
      stdinOpen: params.stdin === true,
      stdinData: stdinData(params.stdin),
    };
    if (params.detached === true) {
      const handle = await this.startHandle(params.cmd, { ...input, timeout: params.timeoutMs ?? 0 }, {});
      if (params.signal !== undefined) this.killOnAbort(handle, params.signal);
      return handle;
    }
    return this.guard(async () => {
      const handle = await this.execHandle(params.cmd, input, params.signal);
      return raceSignal(handle.result, params.signal);
    });
  }

  /**
   * Starts a background process (seed 000) and resolves with its {@link CommandHandle}, which is
   * also seed 000's {@link Process}. Giving `onOutput`, `onExit` or `onError` makes the handle follow
   * the process at once; otherwise it follows when first iterated or waited on. A live duplicate
   * `processId` is a ProcessAlreadyExistsError.
   */
  async startProcess(command: string, options: ProcessOptions = {}): Promise<CommandHandle> {
    const handle = await this.startHandle(
      command,
      {
        ...options,
        timeout: options.timeout ?? 0,
        stdinOpen: options.stdin === true,
        stdinData: stdinData(options.stdin),
      },
      { onOutput: options.onOutput, onExit: options.onExit, onError: options.onError, maxRetainedBytes: options.maxRetainedBytes },
    );
    options.onStart?.(handle);
    if (options.onOutput !== undefined || options.onExit !== undefined || options.onError !== undefined) void handle.follow();
    return handle;
  }

  /** Lists processes (as handles), oldest first: this sandbox's sessions, or every process with `all`. */
  async listProcesses(options: ListProcessesOptions = {}): Promise<CommandHandle[]> {
    return this.guard(async () => {
      const statuses = (options.statuses ?? []).map(statusToProto);
      const sessions = options.all === true ? [""] : [...this.sessions];
      const lists = await Promise.all(sessions.map((sessionId) => this.rpc!.listProcesses({ sessionId, statuses })));
      return lists
        .flatMap((list) => list.processes)
        .map((info) => CommandHandle.forProcess(this.context(), info, { encoding: this.options.encoding }))
        .sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
    });
  }

  /** A handle of any process on the daemon by id, or null when the daemon knows none. */
  async getProcess(id: string): Promise<CommandHandle | null> {
    return this.guard(async () => {
      try {
        const { process } = await this.rpc!.getProcess({ processId: id });
        return process === undefined ? null : this.track(CommandHandle.forProcess(this.context(), process, { encoding: this.options.encoding }));
      } catch (error) {
        if (ConnectError.from(error).code === Code.NotFound) return null;
        throw toSandboxError(error, { processId: id });
      }
    });
  }

  /**
   * A handle of a process whose stream starts at `from` (by default everything the daemon
   * retains): to resume a process this client (or another) was following. ProcessNotFoundError
   * when unknown.
   */
  async attach(id: string, from?: OutputOffsets): Promise<CommandHandle> {
    return this.guard(async () => {
      try {
        const { process } = await this.rpc!.getProcess({ processId: id });
        return this.track(CommandHandle.forProcess(this.context(), process!, { from, encoding: this.options.encoding }));
      } catch (error) {
        throw toSandboxError(error, { processId: id });
      }
    });
  }

  /** Signals a process's group (SIGTERM by default; SIGKILL after 5 s if still alive). ProcessNotFoundError when unknown. */
  async killProcess(id: string, signal = "SIGTERM"): Promise<void> {
    await this.guard(async () => {
      try {
        await this.rpc!.killProcess({ processId: id, signal });
      } catch (error) {
        throw toSandboxError(error, { processId: id });
      }
    });
  }

  /** Signals every live process of this sandbox's sessions with SIGTERM (SIGKILL after 5 s); resolves with how many. */
  async killAllProcesses(signal = "SIGTERM"): Promise<number> {
    return this.guard(async () => {
      const counts = await Promise.all([...this.sessions].map((sessionId) => this.rpc!.killAllProcesses({ sessionId, signal })));
      return counts.reduce((sum, response) => sum + response.killedCount, 0);
    });
  }

  /** Removes the records of exited processes of this sandbox's sessions; resolves with how many. */
  async cleanupCompletedProcesses(): Promise<number> {
    return this.guard(async () => {
      const counts = await Promise.all([...this.sessions].map((sessionId) => this.rpc!.cleanupProcesses({ sessionId })));
      return counts.reduce((sum, response) => sum + response.removedCount, 0);
    });
  }

  /** The output a process's record retains, as text. ProcessNotFoundError when unknown. */
  async getProcessLogs(id: string): Promise<{ stdout: string; stderr: string; processId: string }> {
    const handle = await this.attach(id);
    return { ...(await handle.getLogs()), processId: id };
  }

  /**
   * Follows a process's output as {@link LogEvent}s until it exits (seed 000), from everything the
   * daemon retains, reconnecting on transient failures. Ends when `signal` aborts.
   */
  async *streamProcessLogs(processId: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<LogEvent> {
    const handle = await this.attach(processId);
    yield* logEvents(handle, this.options.encoding, options.signal);
  }

  private context(): CommandContext {
    const connection = this.connection!;
    return { client: this.rpc!, goAwayCount: () => connection.goAwayCount };
  }

  private prepareExec(command: string, input: SpecInput): PreparedExec {
    this.lifecycle.assertRunning();
    const spec = buildSpec(command, input, this.defaults);
    if (input.sessionId !== undefined) this.sessions.add(input.sessionId);
    return { request: { spec }, command: commandLine({ command, args: spec.args ?? [] }), sessionId: spec.sessionId };
  }

  private async execHandle(command: string, input: SpecInput, signal: AbortSignal | undefined): Promise<CommandHandle> {
    const prepared = this.prepareExec(command, input);
    const controller = new AbortController();
    const unlink = linkAbort(signal, controller);
    try {
      const handle = await CommandHandle.exec(this.context(), prepared.request, { signal: controller.signal, encoding: input.encoding ?? this.options.encoding });
      handle.follow().then(unlink, unlink);
      return handle;
    } catch (error) {
      unlink();
      throw signal?.aborted ? signal.reason : error;
    }
  }

  private async startHandle(command: string, input: SpecInput, callbacks: ProcessOptions): Promise<CommandHandle> {
    return this.guard(async () => {
      this.lifecycle.assertRunning();
      const spec = buildSpec(command, input, this.defaults);
      if (input.sessionId !== undefined) this.sessions.add(input.sessionId);
      try {
        const { process } = await this.rpc!.startProcess({ spec });
        return this.track(
          CommandHandle.forProcess(this.context(), process!, {
            encoding: input.encoding ?? this.options.encoding,
            onOutput: callbacks.onOutput,
            onExit: callbacks.onExit,
            onError: callbacks.onError,
            maxRetainedBytes: callbacks.maxRetainedBytes,
          }),
        );
      } catch (error) {
        throw toSandboxError(error, { processId: input.processId });
      }
    });
  }

  private killOnAbort(handle: CommandHandle, signal: AbortSignal): void {
    const kill = () => void handle.kill("SIGTERM", { gracePeriodMs: 1000 }).catch(() => {});
    if (signal.aborted) kill();
    else {
      signal.addEventListener("abort", kill, { once: true });
      void handle.follow().then(
        () => signal.removeEventListener("abort", kill),
        () => {},
      );
    }
  }

  private track(handle: CommandHandle): CommandHandle {
    for (const known of this.handles) if (known.exit !== undefined) this.handles.delete(known);
    this.handles.add(handle);
    return handle;
  }

  private release(): void {
    for (const handle of this.handles) handle.detach();
    this.handles.clear();
    this.connection?.close();
    this.connection = undefined;
    this.rpc = undefined;
  }

  /**
   * Runs a call while running; maps failures to SandboxErrors, and a daemon that cannot be reached
   * (UNAVAILABLE from the transport, not a stream cut mid-call) moves the sandbox to `error`, from
   * which start() reconnects.
   */
  private async guard<T>(call: () => Promise<T>): Promise<T> {
    this.lifecycle.assertRunning();
    try {
      return await call();
    } catch (error) {
      if (!(error instanceof SandboxError) && !(error instanceof ConnectError)) throw error;
      const failure = toSandboxError(error);
      // Only a daemon that cannot be reached at all counts, not a stream cut under a call in progress.
      const unreachable = failure.cause instanceof ConnectError && isUnreachable(failure.cause);
      if (unreachable && this.status === "running") this.lifecycle.transition("error");
      throw failure;
    }
  }
}

/**
 * Connects to a daemon: creates a {@link Sandbox} and starts it. Use with `await using` to close it
 * (and kill its processes) at the end of the scope.
 */
export async function connect(options: SandboxOptions): Promise<Sandbox> {
  const sandbox = new Sandbox(options);
  await sandbox.start();
  return sandbox;
}

function stdinData(stdin: boolean | string | Uint8Array | undefined): string | Uint8Array | undefined {
  return typeof stdin === "boolean" ? undefined : stdin;
}

function raceSignal<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return promise;
  return promise.catch((error: unknown) => {
    throw signal.aborted ? signal.reason : error;
  });
}
