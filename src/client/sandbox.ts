import { randomBytes } from "node:crypto";
import { ConnectError, createClient, type Client } from "@connectrpc/connect";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { FileService } from "../../gen/sandbox/v1/files_pb.js";
import {
  type DaemonAddress,
  defaultReconnectSettings,
  resolveDaemonAddress,
  tlsMismatch,
  type CommandFinished,
  type CommandDefaults,
  type CommandOptions,
  isUnreachable,
  SandboxError,
  toSandboxError,
  type OutputOffsets,
  type ProcessHandle,
  type ProcessLogs,
  type ReconnectSettings,
  createSandboxConnection,
  type SandboxConnection,
  type SandboxConnectionOptions,
  type ListeningPort,
  type ListPortsOptions,
  type PortReady,
  type WaitForPortOptions,
  readiness,
} from "./core/index.js";
import {
  type CommandHandle,
  exec,
  execStream,
  type ExecEvent,
  type ExecOptions,
  type ExecOutput,
  type ExecResult,
  type StreamOptions,
  type LogEvent,
  type ListProcessesOptions,
  type ProcessesContext,
  type ProcessOptions,
  runCommand,
  type Command,
  type RunCommandOptions,
  type RunCommandParams,
  run,
  type RunOptions,
  processes,
} from "./wrappers/index.js";
import { assertTransition, canTransition, notRunningError, type SandboxStatus } from "./lifecycle.js";
import { SandboxFiles } from "./files/index.js";

/** Options of a {@link Sandbox}: the connection's, and what the sandbox adds to its commands. */
export interface SandboxOptions extends Omit<SandboxConnectionOptions, "baseUrl"> {
  /**
   * Base URL of the daemon, `http://host:port` or `https://host:port`; the `SANDBOXD_URL` environment
   * variable when not given, else `http://127.0.0.1:7007`. Anything else is a SandboxError
   * INVALID_ARGUMENT from the constructor.
   */
  baseUrl?: string;
  /**
   * Bearer token sent on every call; the `SANDBOXD_TOKEN` environment variable (the daemon's own)
   * when not given; none when neither is set.
   */
  token?: string;
  /**
   * Send the token over cleartext `http://` to a host that is not loopback. Without it such a
   * sandbox is refused (SandboxError INVALID_ARGUMENT): anyone on the path could read the token and
   * run commands with it. Default false; use `https://` instead where you can.
   */
  allowCleartextToken?: boolean;
  /** Identifier of this sandbox; 12 random hex characters by default. */
  sandboxId?: string;
  /** Session of the commands this sandbox starts; the sandbox id by default. stop() kills its processes. */
  sessionId?: string;
  /**
   * Time limit of waiting runs (exec, execStream, waiting run and runCommand) in milliseconds;
   * 30000 by default (the Orbiter sandbox's 30 s), 0 for none. Background commands have none
   * unless asked.
   */
  timeoutMs?: number;
  /**
   * Workspace directories on the sandbox's machine; the first is the default working directory and
   * relative `cwd`s start from it. Empty by default: the daemon's first root is the default. The
   * daemon confines `cwd` to its own roots either way.
   */
  workspace?: readonly string[];
  /** Encoding of text output; default `"utf-8"`. */
  encoding?: string;
  /** Milliseconds start() waits for the daemon to answer; 10000 by default. */
  connectTimeoutMs?: number;
  /**
   * How this sandbox's handles reconnect after their stream fails: the settings given here, for
   * this sandbox only; the rest are the defaults ({@link defaultReconnectSettings}, or for a
   * CommandHandle its class's LangSmith-style statics).
   */
  reconnect?: Partial<ReconnectSettings>;
}

/** What {@link Sandbox.describe} returns: the Orbiter sandbox's `describe()` keys, camel-cased, and the connection's. */
export interface SandboxDescription {
  /** The sandbox id. */
  sandboxId: string;
  /** Current lifecycle state. */
  status: SandboxStatus;
  /** The workspace directories. */
  workspace: string[];
  /** Time limit of waiting runs in seconds, as the Orbiter sandbox reports it. */
  timeout: number;
  /** Session of its commands. */
  sessionId: string;
  /** The daemon's base URL. */
  baseUrl: string;
  /** The wire protocol. */
  protocol: NonNullable<SandboxConnectionOptions["protocol"]>;
}

/** Options of {@link Sandbox.close}. */
export interface CloseOptions {
  /**
   * Kill the live background processes of this sandbox's sessions first. Default false: a process
   * started to outlive the script (a dev server an agent started) keeps running after close(), as it
   * does when the script just exits. Waiting calls still running end either way (their commands die
   * with their calls).
   */
  killProcesses?: boolean;
}

/** The connection of a sandbox and what its commands get from it. */
interface Link {
  readonly connection: SandboxConnection;
  readonly context: ProcessesContext;
  readonly files: Client<typeof FileService>;
}

/**
 * SandboxState is where a sandbox is: the Orbiter lifecycle's status and, exactly where there is
 * one, its connection, in one value (as connect-node's Http2SessionManager keeps its state).
 *
 * - `init`: created, never started.
 * - `running`: connected; commands run through `link`.
 * - `error`: a start failed, or a call found the daemon unreachable: then `link` is the connection
 *   it had, kept open for the handles still following their commands (they reconnect on their own)
 *   until stop(), close() or a new start().
 * - `idle`: stopped; may start again.
 * - `closed`: final.
 */
type SandboxState =
  | { readonly status: "init" | "idle" | "closed" }
  | { readonly status: "running"; readonly link: Link }
  | { readonly status: "error"; readonly link?: Link };

/**
 * Sandbox is a client of one sandboxd daemon. Its lifecycle is the Orbiter sandbox's: `init` until
 * start(), `running` while connected, `idle` after stop(), `error` when starting failed or the
 * daemon could not be reached, `closed` after close() (or cleanup()). Only that API's transitions
 * are allowed (SandboxError INVALID_TRANSITION otherwise), and commands run only while `running`
 * (SandboxError NOT_RUNNING).
 *
 * Its commands come in the shapes of the APIs it mirrors, all thin wrappers over one command core
 * (launch() and {@link ProcessHandle}): the Cloudflare Sandbox SDK's exec/execStream and process
 * calls, the Together sandbox SDK's `exec(command, args)` and `getOutput()`, the LangSmith sandbox
 * SDK's `run()` and CommandHandle, and Vercel Sandbox's `runCommand()`. Waiting runs go through
 * Exec, so cancelling them, or losing this client, kills them on the daemon; background commands
 * outlive their calls and are followed through resumable log streams, and close() (or the end of an
 * `await using` scope) too, unless `close({ killProcesses: true })`; stop() kills them.
 */
export class Sandbox implements AsyncDisposable {
  /** The sandbox id. */
  readonly sandboxId: string;
  /** Session of this sandbox's commands. */
  readonly sessionId: string;
  private s: SandboxState = { status: "init" };
  /** Connections of earlier runs whose handles may still follow commands; closed with the next release. */
  private readonly earlier: SandboxConnection[] = [];
  private readonly sessions = new Set<string>();
  private readonly handles = new Set<ProcessHandle>();
  private readonly defaults: CommandDefaults;
  private readonly address: DaemonAddress;
  /**
   * The sandbox's file API: read, write, list, stat, watch... the files inside the daemon's
   * workspace roots, streamed (see {@link SandboxFiles}), as E2B's `sandbox.files`. Its calls run
   * while the sandbox is `running` (SandboxError NOT_RUNNING otherwise).
   */
  readonly files: SandboxFiles = new SandboxFiles({
    client: () => {
      if (this.s.status !== "running") throw notRunningError(this.s.status);
      return this.s.link.files;
    },
    fail: (error) => this.fail(error),
    reconnect: () => ({ ...defaultReconnectSettings, ...this.options.reconnect }),
    goAwayCount: () => ("link" in this.s ? (this.s.link?.connection.goAwayCount ?? 0) : 0),
  });

  /**
   * Creates a sandbox in state `init`; start() connects it. Throws a SandboxError
   * INVALID_ARGUMENT for a bad base URL or a token that would go in clear (see
   * {@link SandboxOptions.allowCleartextToken}).
   */
  constructor(private readonly options: SandboxOptions = {}) {
    if ("timeout" in options)
      throw new SandboxError(
        "SandboxOptions has no `timeout`: the time limit is timeoutMs, in milliseconds",
        "INVALID_ARGUMENT",
      );
    this.address = resolveDaemonAddress(options);
    this.sandboxId = options.sandboxId ?? randomBytes(6).toString("hex");
    this.sessionId = options.sessionId ?? this.sandboxId;
    this.sessions.add(this.sessionId);
    const timeoutMs = options.timeoutMs ?? 30_000;
    this.defaults = {
      sessionId: this.sessionId,
      timeoutMs,
      workspace: [...(options.workspace ?? [])],
      encoding: options.encoding,
    };
  }

  /** Current lifecycle state. */
  get status(): SandboxStatus {
    return this.s.status;
  }

  /** A copy of the workspace directories. */
  get workspace(): string[] {
    return [...this.defaults.workspace];
  }

  /** Time limit of waiting runs, in milliseconds. */
  get timeoutMs(): number {
    return this.defaults.timeoutMs;
  }

  /** The generated, fully typed client, for the raw RPCs; only while running. */
  get client(): Client<typeof SandboxService> {
    return this.running().client;
  }

  /** Describes the sandbox, as the Orbiter sandbox's `describe()` (its `timeout` in seconds), with the connection. */
  describe(): SandboxDescription {
    return {
      sandboxId: this.sandboxId,
      status: this.status,
      workspace: this.workspace,
      timeout: this.timeoutMs / 1000,
      sessionId: this.sessionId,
      baseUrl: this.address.baseUrl,
      protocol: this.options.protocol ?? "grpc",
    };
  }

  /**
   * Connects and checks that the daemon answers (and accepts the token): `init`, `idle` or `error`
   * to `running`. On failure the connection is released and the sandbox goes to `error` (from
   * `idle`; from `init`, where the Orbiter lifecycle allows no error, it stays `init`) and this throws.
   */
  async start(): Promise<void> {
    assertTransition(this.s.status, "running");
    const connection = createSandboxConnection({
      ...this.options,
      baseUrl: this.address.baseUrl,
      token: this.address.token,
    });
    const client = createClient(SandboxService, connection.transport);
    try {
      await client.listProcesses({ sessionId: this.sessionId }, { timeoutMs: this.options.connectTimeoutMs ?? 10_000 });
    } catch (error) {
      connection.close();
      if (this.s.status === "idle") this.s = { status: "error" };
      const mismatch = tlsMismatch(this.address.baseUrl, error);
      if (mismatch !== undefined) throw new SandboxError(mismatch, "UNAVAILABLE", { cause: error });
      throw toSandboxError(error);
    }
    // Another start() or a close() may have come first while this one waited.
    if (!canTransition(this.s.status, "running")) connection.close();
    assertTransition(this.s.status, "running");
    if (this.s.status === "error" && this.s.link !== undefined) this.earlier.push(this.s.link.connection);
    this.s = {
      status: "running",
      link: {
        connection,
        context: this.createContext(connection, client),
        files: createClient(FileService, connection.transport),
      },
    };
  }

  /**
   * Kills the processes of this sandbox's sessions, stops following them and releases the
   * connection: `running` to `idle`. start() may follow. If the daemon cannot be reached the
   * sandbox goes to `error` and this throws.
   */
  async stop(): Promise<void> {
    assertTransition(this.s.status, "idle");
    try {
      await this.killAllProcesses();
    } catch (error) {
      // The kill may already have found the daemon unreachable and moved to `error`.
      this.release({ status: "error" });
      throw error;
    }
    this.release({ status: "idle" });
  }

  /**
   * Closes the sandbox for good: releases the connection (waiting calls still running end, and the
   * daemon kills their commands) and goes to `closed`. Background processes (startProcess,
   * `run(..., { wait: false })`, a detached runCommand) keep running, as when a script just exits:
   * a dev server outlives the script that started it; `killProcesses: true` kills this sandbox's
   * sessions' live processes first (failures to reach the daemon are ignored). Closing a closed
   * sandbox does nothing.
   */
  async close(options: CloseOptions = {}): Promise<void> {
    if (this.s.status === "closed") return;
    if (this.s.status === "running" && options.killProcesses === true) {
      await this.killAllProcesses().catch(() => {});
    }
    this.release({ status: "closed" });
  }

  /** Closes the sandbox for good, as the Orbiter sandbox's `cleanup()`: the same as {@link close} (background processes run on). */
  cleanup(): Promise<void> {
    return this.close();
  }

  /** Closes the sandbox (see {@link close}: background processes run on); for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * Runs a command and waits for it, in the shape of the Cloudflare Sandbox SDK's `exec(command,
   * options)` (an {@link ExecResult}; a command killed by its time limit rejects with
   * ExecutionTimeoutError naming it) or the Together sandbox SDK's `exec(command, args, options)`
   * (`{ exitCode, output }`, 137 after the limit). Time limit: `timeout` (Cloudflare, in
   * milliseconds) or `timeoutMs` (Together), by default the sandbox's `timeoutMs` (30 s; 0 for
   * none). See exec.ts's {@link exec} for what each resolves and rejects with.
   */
  exec(command: string, options?: ExecOptions): Promise<ExecResult>;
  exec(command: string, args: readonly string[], options?: Omit<CommandOptions, "args">): Promise<ExecOutput>;
  exec(
    command: string,
    second?: ExecOptions | readonly string[],
    third?: Omit<CommandOptions, "args">,
  ): Promise<ExecResult | ExecOutput> {
    return this.guard((context) => exec(context, command, second, third));
  }

  /**
   * Runs a command as an async iterable of {@link ExecEvent}s, as the Cloudflare Sandbox SDK's
   * `execStream()`: `start`, `stdout`/`stderr` events (text in `data`, bytes in `bytes`), then
   * `complete` or one `error`. It keeps none of the output it handed over (the `complete` event's
   * result has empty text) unless `maxRetainedBytes` asks. Leaving the loop early kills the command. Time limit: `timeout`, in
   * milliseconds, by default the sandbox's `timeoutMs` (30 s; 0 for none); its expiry is an `error`
   * event with an ExecutionTimeoutError naming the limit.
   */
  async *execStream(command: string, options?: StreamOptions): AsyncGenerator<ExecEvent> {
    yield* execStream(this.running(), command, options);
  }

  /**
   * Runs a command as the LangSmith sandbox SDK's `run()`: with `wait: false` resolves at once with
   * a live {@link CommandHandle} (whose `kill()` is SIGKILL); otherwise waits and resolves with its
   * {@link CommandFinished}. Time limit: `timeout`, in seconds as there; a waiting run's default is
   * the sandbox's `timeoutMs` (30 s; 0 for none), a background one has none; its expiry is
   * `timedOut` with exit code 137.
   */
  run(command: string, options: RunOptions & { wait: false }): Promise<CommandHandle>;
  run(command: string, options?: RunOptions & { wait?: true }): Promise<CommandFinished>;
  run(command: string, options?: RunOptions): Promise<CommandHandle | CommandFinished> {
    return this.guard((context) => run(context, command, options));
  }

  /**
   * Runs a command as Vercel Sandbox's `runCommand()`: blocking resolves with a
   * {@link CommandFinished} (exitCode, stdout(), stderr()); `detached: true` resolves at once with a
   * live {@link Command} (wait(), logs(), kill() with SIGTERM). Time limit: `timeoutMs`, in
   * milliseconds; a blocking call's default is the sandbox's `timeoutMs` (30 s; 0 for none), a
   * detached one has none; it SIGKILLs (exit code 137). `signal` cancels, `sudo` runs as root where
   * the daemon allows it.
   */
  runCommand(
    cmd: string,
    args: readonly string[] | undefined,
    options: RunCommandOptions & { detached: true },
  ): Promise<Command>;
  runCommand(
    cmd: string,
    args?: readonly string[],
    options?: RunCommandOptions & { detached?: false },
  ): Promise<CommandFinished>;
  runCommand(params: RunCommandParams & { detached: true }): Promise<Command>;
  runCommand(params: RunCommandParams & { detached?: false }): Promise<CommandFinished>;
  runCommand(
    first: string | RunCommandParams,
    args?: readonly string[],
    options?: RunCommandOptions,
  ): Promise<Command | CommandFinished> {
    return this.guard((context) => runCommand(context, first, args, options));
  }

  /**
   * Starts a background process, as the Cloudflare Sandbox SDK's `startProcess()`, and resolves with
   * its {@link ProcessHandle} (that SDK's `Process`; `kill()` sends SIGTERM). A live duplicate
   * `processId` is a ProcessAlreadyExistsError.
   */
  startProcess(command: string, options?: ProcessOptions): Promise<ProcessHandle> {
    return this.guard((context) => processes.startProcess(context, command, options));
  }

  /** Lists processes (as handles), oldest first: this sandbox's sessions, or every process with `all` (Cloudflare-style). */
  listProcesses(options?: ListProcessesOptions): Promise<ProcessHandle[]> {
    return this.guard((context) => processes.listProcesses(context, options));
  }

  /** A handle of any process on the daemon by id, or null when the daemon has no record of it (Cloudflare-style). */
  getProcess(id: string): Promise<ProcessHandle | null> {
    return this.guard((context) => processes.getProcess(context, id));
  }

  /**
   * A handle of a process whose stream starts at `from` (by default everything the daemon
   * retains): to resume a process this client (or another) was following. ProcessNotFoundError
   * when unknown.
   */
  attach(id: string, from?: OutputOffsets): Promise<ProcessHandle> {
    return this.guard((context) => processes.attach(context, id, from));
  }

  /** Signals a process's group (SIGTERM by default; SIGKILL after 5 s if still alive), Cloudflare-style. ProcessNotFoundError when unknown. */
  async killProcess(id: string, signal?: string): Promise<void> {
    await this.guard((context) => processes.killProcess(context, id, signal));
  }

  /** Signals every live process of this sandbox's sessions with SIGTERM (SIGKILL after 5 s); resolves with how many (Cloudflare-style). */
  killAllProcesses(signal?: string): Promise<number> {
    return this.guard((context) => processes.killAllProcesses(context, signal));
  }

  /** Removes the records of exited processes of this sandbox's sessions; resolves with how many (Cloudflare-style). */
  cleanupCompletedProcesses(): Promise<number> {
    return this.guard((context) => processes.cleanupCompletedProcesses(context));
  }

  /**
   * The output a process's record retains, as text, in one call (Cloudflare-style): each stream's
   * first bytes and last, with `dropped` naming the gap between them, if any. ProcessNotFoundError
   * when unknown.
   */
  getProcessLogs(id: string): Promise<ProcessLogs & { processId: string }> {
    return this.guard((context) => processes.getProcessLogs(context, id));
  }

  /**
   * What a process printed so far, joined, and its exit code once it exited, as the Together
   * sandbox SDK's `getOutput()`: a snapshot that never waits. ProcessNotFoundError when unknown.
   */
  getOutput(id: string): Promise<{ exitCode?: number; output: string }> {
    return this.guard((context) => processes.getOutput(context, id));
  }

  /**
   * Follows a process's output as {@link LogEvent}s until it exits, as the Cloudflare Sandbox SDK's
   * `streamProcessLogs()`, reconnecting on transient failures. Ends when `signal` aborts.
   */
  async *streamProcessLogs(processId: string, options?: { signal?: AbortSignal }): AsyncGenerator<LogEvent> {
    yield* processes.streamProcessLogs(this.running(), processId, options);
  }

  /**
   * Waits until `port` answers inside the sandbox, checked by the daemon from there: by default an
   * HTTP GET of `/` with a status from 200 to 399, `mode: "tcp"` a connection (options as a
   * process handle's `waitForPort`, the Cloudflare Sandbox SDK's). With `processId` the wait is tied
   * to that process, whose exit ends it at once with a ProcessExitedBeforeReadyError. Rejects with a
   * ProcessReadyTimeoutError (its last output lines, what the last try found) on `timeout`.
   */
  waitForPort(port: number, options?: WaitForPortOptions & { processId?: string }): Promise<PortReady> {
    return this.guard((context) => readiness.waitForPort(context.client, port, options));
  }

  /**
   * Lists the TCP ports listening inside the sandbox, lowest first, each with the pid and program
   * holding it and, when it is one of the sandbox's processes or started by one, that process's id:
   * so the port a dev server actually took is found. `processId` lists that process's ports only.
   */
  listPorts(options?: ListPortsOptions): Promise<ListeningPort[]> {
    return this.guard((context) => readiness.listPorts(context.client, options));
  }

  private createContext(connection: SandboxConnection, client: Client<typeof SandboxService>): ProcessesContext {
    return {
      client,
      goAwayCount: () => connection.goAwayCount,
      reconnect: this.options.reconnect,
      defaults: this.defaults,
      useSession: (sessionId) => void this.sessions.add(sessionId),
      sessions: () => [...this.sessions],
      track: (handle) => {
        for (const known of this.handles) if (known.exit !== undefined) this.handles.delete(known);
        this.handles.add(handle);
        return handle;
      },
    };
  }

  /** The running sandbox's command context; SandboxError NOT_RUNNING otherwise. */
  private running(): ProcessesContext {
    if (this.s.status !== "running") throw notRunningError(this.s.status);
    return this.s.link.context;
  }

  /**
   * Stops following every handle, closes the connections and moves to `next`, a state without a
   * connection; moving from `error` to `error` keeps the status and lets the kept connection go.
   */
  private release(next: { readonly status: "idle" | "error" | "closed" }): void {
    if (this.s.status !== next.status) assertTransition(this.s.status, next.status);
    for (const handle of this.handles) handle.detach();
    this.handles.clear();
    if ("link" in this.s) this.s.link?.connection.close();
    for (const connection of this.earlier.splice(0)) connection.close();
    this.s = next;
  }

  /**
   * Runs a call while running and is its error boundary: failures become SandboxErrors, and a
   * daemon that cannot be reached (not a stream cut under a call in progress) moves the sandbox to
   * `error`, from which start() reconnects.
   */
  private async guard<T>(call: (context: ProcessesContext) => Promise<T>): Promise<T> {
    const context = this.running();
    try {
      return await call(context);
    } catch (error) {
      if (!(error instanceof SandboxError) && !(error instanceof ConnectError)) throw error;
      throw this.fail(error);
    }
  }

  /** A call's failure as a SandboxError; a daemon that could not be reached moves the sandbox to `error`. */
  private fail(error: unknown): SandboxError {
    const failure = toSandboxError(error);
    const unreachable = failure.cause instanceof ConnectError && isUnreachable(failure.cause);
    if (unreachable && this.s.status === "running") this.s = { status: "error", link: this.s.link };
    return failure;
  }
}

/**
 * Connects to a daemon: creates a {@link Sandbox} and starts it. Use with `await using` to close it
 * (and kill its processes) at the end of the scope.
 */
export async function connect(options: SandboxOptions = {}): Promise<Sandbox> {
  const sandbox = new Sandbox(options);
  await sandbox.start();
  return sandbox;
}
