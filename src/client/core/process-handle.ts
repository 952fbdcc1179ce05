import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { ExecRequestSchema, ProcessInfo, SandboxService } from "../../../gen/sandbox/v1/sandbox_pb.js";
import { onAbort, raceSignal } from "../../shared/abort.js";
import { ptySizeProblem } from "../../shared/limits.js";
import { CommandFinished } from "./command-finished.js";
import { DEFAULT_MAX_RETAINED_BYTES, type CommandOptions } from "./command-options.js";
import { CommandOutput } from "./command-output.js";
import { CommandRecord } from "./command-record.js";
import { createExecSource, createLogsSource, type CommandEvent } from "./command-source.js";
import { CommandStream, type SettledState } from "./command-stream.js";
import { defaultReconnectSettings, type ReconnectSettings } from "./reconnect-policy.js";
import { ExecutionTimeoutError, SandboxError, toSandboxError } from "./errors.js";
import { InputStream, type InputAck } from "./input-stream.js";
import type { OutputChunk, OutputGap, OutputOffsets, OutputStreamName } from "./output.js";
import { StreamDecoder } from "./stream-decoder.js";
import {
  detailsFromProto,
  exitFromProto,
  gapFromProto,
  type ProcessDetails,
  type ProcessExit,
} from "./process-record.js";
import type { ProcessStatus } from "../../shared/process-status.js";
import type { ExitCause } from "../../shared/exit-cause.js";
import type { RetainedOutput } from "./retained-output.js";
import * as readiness from "./readiness.js";
import type {
  PortReady,
  WaitForExitOptions,
  WaitForLogOptions,
  WaitForLogResult,
  WaitForPortOptions,
} from "./readiness.js";

/** What a handle needs from the sandbox that made it. */
export interface CommandContext {
  /** The generated client. */
  readonly client: Client<typeof SandboxService>;
  /** Graceful GOAWAY frames received so far on the client's connection (see SandboxConnection). */
  readonly goAwayCount: () => number;
  /** The sandbox's own reconnect settings (its `reconnect` option); unset ones are the defaults. */
  readonly reconnect?: Partial<ReconnectSettings>;
}

/** The options a handle itself uses: text decoding, retention and callbacks. */
export type HandleOptions = Pick<CommandOptions, "encoding" | "maxRetainedBytes" | "onOutput" | "onExit" | "onError">;

/** A log entry of `logs()`: decoded text of one stream. */
export interface CommandLog {
  /** The stream it came from. */
  stream: OutputStreamName;
  /** The text (as it arrived; not split into lines). */
  data: string;
}

/** Options of {@link ProcessHandle.wait}. */
export interface WaitOptions {
  /** Stops waiting (not the command) when aborted; the wait rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Stops waiting (not the command) after this many milliseconds with ExecutionTimeoutError. */
  timeoutMs?: number;
}

/** Options of {@link ProcessHandle.kill}. */
export interface KillOptions {
  /** Milliseconds before the daemon escalates to SIGKILL; 5000 by default, never when negative. */
  gracePeriodMs?: number;
}

/** A handle class (ProcessHandle or a subclass), as {@link ProcessHandle.forProcess} creates it. */
export interface HandleClass<H extends ProcessHandle> {
  /** See {@link ProcessHandle.forProcess}. */
  forProcess(context: CommandContext, info: ProcessInfo | ProcessDetails, options?: HandleOptions): H;
}

/** Where a handle starts: a new command through Exec, or a known process read from offsets. */
type HandleStart =
  | { kind: "exec"; request: MessageInitShape<typeof ExecRequestSchema> }
  | { kind: "process"; details: ProcessDetails; from?: OutputOffsets; retained?: RetainedOutput };

/**
 * ProcessHandle is a live handle to one command in the sandbox: the command core every API of this
 * client is built on. It assembles small parts: the process record ({@link CommandRecord}), a
 * {@link CommandStream} that follows the command and reconnects, the {@link CommandOutput} it
 * feeds (offsets, the output kept for the result, iterators with backpressure, `onOutput`), and
 * an {@link InputStream} for stdin.
 *
 * - Iterating it (`for await (const chunk of handle)`) yields {@link OutputChunk}s of stdout and
 *   stderr interleaved in arrival order, each with its byte offset. Several iterators may run, the
 *   slowest holding the stream back; one that starts late first gets the chunks still kept.
 *   Leaving the loop early detaches that iterator only; the command keeps running.
 * - `result` / `wait()` resolve with a {@link CommandFinished} once the command exits.
 * - `logs()` yields `{ stream, data }` text, `kill(signal = "SIGTERM")` signals the process group,
 *   `sendInput`/`closeInput`/`resize` go over one SendInput stream.
 *
 * A handle of a background process follows it through StreamLogs, resuming from
 * `lastStdoutOffset`/`lastStderrOffset` after a transient failure as {@link CommandStream} says
 * (never after `kill()`). Bytes below its offsets are skipped, so none is duplicated; bytes the
 * daemon no longer retains end the stream with {@link OutputLostError} rather than silently. A
 * lasting failure ends it with a {@link SandboxError}, never a hang.
 *
 * A handle of a command run through Exec cannot resume: the daemon kills an Exec command whose
 * call is gone, so a broken connection is a SandboxError with code UNAVAILABLE.
 *
 * It is what startProcess() resolves with (the Cloudflare Sandbox SDK's `Process`), and a detached
 * runCommand() (Vercel Sandbox's `Command`); {@link CommandHandle} is the LangSmith-style subclass.
 */
export class ProcessHandle implements AsyncIterable<OutputChunk>, AsyncDisposable {
  private readonly record: CommandRecord;
  private readonly output: CommandOutput;
  private readonly stream: CommandStream;
  private input?: InputStream;
  /** Caller's signal that kills the command, carried over by reconnect(). */
  private killSignal?: AbortSignal;
  /** Listeners on callers' signals, removed once the stream settles. */
  private readonly whenSettled: Array<() => void> = [];
  /** The first iterator, subscribed before any output arrived (see {@link ProcessHandle.exec}'s `iterated`). */
  private firstIterator?: AsyncGenerator<OutputChunk>;

  /** @internal Use {@link ProcessHandle.exec} or {@link ProcessHandle.forProcess}. */
  constructor(
    private readonly context: CommandContext,
    start: HandleStart,
    protected readonly options: HandleOptions,
  ) {
    const text = { encoding: options.encoding, onOutput: options.onOutput };
    if (start.kind === "exec") {
      this.record = new CommandRecord();
      this.output = new CommandOutput({ ...text, limitBytes: options.maxRetainedBytes ?? Infinity });
    } else {
      this.record = new CommandRecord(start.details);
      const limitBytes = options.maxRetainedBytes ?? start.retained?.limitBytes ?? DEFAULT_MAX_RETAINED_BYTES;
      this.output = new CommandOutput({ ...text, limitBytes, from: start.from, carried: start.retained });
    }
    const source =
      start.kind === "exec"
        ? createExecSource(context.client, start.request)
        : createLogsSource(context.client, start.details.id);
    const target = {
      offsets: () => this.output.offsets,
      apply: (event: CommandEvent, signal: AbortSignal) => this.apply(event, signal),
    };
    this.stream = new CommandStream(
      source,
      target,
      context.goAwayCount,
      () => ({ ...(this.constructor as typeof ProcessHandle).reconnectDefaults(), ...context.reconnect }),
      (state) => this.settled(state),
    );
  }

  /**
   * The reconnect settings of this class's handles where their sandbox's `reconnect` option sets
   * none: {@link defaultReconnectSettings}. A handle reads them, under its sandbox's option, at each
   * failure; a subclass may have its own (CommandHandle's are its LangSmith-style statics).
   */
  static reconnectDefaults(): ReconnectSettings {
    return defaultReconnectSettings;
  }

  /**
   * Runs a command through Exec and resolves with its handle once the daemon reports it started;
   * rejects when the daemon refuses it, and with the signal's reason when `signal` aborts first.
   * Aborting `signal` later cancels the call, which kills the command. With `iterated`, the first
   * iterator of the handle is subscribed before the call starts, so it gets every byte whatever the
   * handle keeps for its result (and holds the stream back until it is iterated).
   * @internal Used by the command core's launch().
   */
  static async exec(
    context: CommandContext,
    request: MessageInitShape<typeof ExecRequestSchema>,
    options: HandleOptions & { signal?: AbortSignal; iterated?: boolean },
  ): Promise<ProcessHandle> {
    const handle = new ProcessHandle(context, { kind: "exec", request }, options);
    if (options.iterated) handle.firstIterator = handle.output.subscribe();
    if (options.signal !== undefined) handle.stopOnAbort(options.signal);
    void handle.follow();
    await handle.record.started;
    return handle;
  }

  /**
   * Creates a handle (of the class it is called on) of a known process whose stream starts at
   * `from` (0, 0 by default) when first consumed; `retained` is output already received before it.
   * @internal Used by the command core.
   */
  static forProcess<H extends ProcessHandle>(
    this: new (
      context: CommandContext,
      start: HandleStart,
      options: HandleOptions,
    ) => H,
    context: CommandContext,
    info: ProcessInfo | ProcessDetails,
    options: HandleOptions & { from?: OutputOffsets; retained?: RetainedOutput } = {},
  ): H {
    const details = "processId" in info ? detailsFromProto(info) : info;
    return new this(context, { kind: "process", details, from: options.from, retained: options.retained }, options);
  }

  /** The process id (client-chosen or a UUID). */
  get id(): string {
    return this.record.details?.id ?? "";
  }

  /** The process id; the same as {@link id}, named as LangSmith's CommandHandle names it. */
  get commandId(): string {
    return this.id;
  }

  /** Operating-system pid on the sandbox, also its process group id; undefined if never spawned. */
  get pid(): number | undefined {
    return this.record.details?.pid;
  }

  /** The command as given (without its arguments). */
  get command(): string {
    return this.record.details?.command ?? "";
  }

  /** The arguments as given, for argv form. */
  get args(): readonly string[] {
    return this.record.details?.args ?? [];
  }

  /** Session the process belongs to, if any. */
  get sessionId(): string | undefined {
    return this.record.details?.sessionId;
  }

  /**
   * How much of its output the daemon keeps, in bytes: the first `headBytes` of each stream and
   * the last `tailBytes` of both (see {@link CommandOptions.retention}); undefined until known.
   */
  get retention(): { headBytes: number; tailBytes: number } | undefined {
    return this.record.details?.retention;
  }

  /** Status as last seen by this handle (its stream, `getStatus()` or `kill()`). */
  get status(): ProcessStatus {
    return this.record.exit?.status ?? this.record.details?.status ?? "starting";
  }

  /** When the process started. */
  get startTime(): Date {
    return this.record.details?.startTime ?? new Date(0);
  }

  /** When the process ended, once known. */
  get endTime(): Date | undefined {
    return this.record.exit?.endTime;
  }

  /** The exit code once known (128 + signal number for a signal), else undefined. */
  get exitCode(): number | undefined {
    return this.record.exit?.exitCode;
  }

  /** Why the process ended, once known (see ProcessExit.cause). */
  get cause(): ExitCause | undefined {
    return this.record.exit?.cause;
  }

  /** How the process ended, once known. */
  get exit(): ProcessExit | undefined {
    return this.record.exit;
  }

  /**
   * Offset after the last stdout byte handed to you: yielded by an iterator of this handle (or
   * skipped by an OutputLostError it threw), or, while none yielded anything, received for the
   * result. Where {@link reconnect} resumes; it does not move once your loop has left.
   */
  get lastStdoutOffset(): number {
    return this.output.resumeOffsets.stdout;
  }

  /** Offset after the last stderr byte handed to you, as {@link lastStdoutOffset} says for stdout. */
  get lastStderrOffset(): number {
    return this.output.resumeOffsets.stderr;
  }

  /** How many times this handle reconnected on its own. */
  get autoReconnects(): number {
    return this.stream.reconnectCount;
  }

  /** The final result; reading it starts following the command (see {@link wait}). */
  get result(): Promise<CommandFinished> {
    return this.follow();
  }

  /**
   * Waits for the command to exit and resolves with a {@link CommandFinished}; rejects with a
   * SandboxError when the stream fails for good. `signal` and `timeoutMs` bound the wait only.
   */
  async wait(options: WaitOptions = {}): Promise<CommandFinished> {
    let waiting = this.follow();
    const { timeoutMs } = options;
    if (timeoutMs !== undefined)
      waiting = raceSignal(waiting, AbortSignal.timeout(timeoutMs), () => new ExecutionTimeoutError(timeoutMs));
    return raceSignal(waiting, options.signal);
  }

  /** Starts following the command if nobody does yet, so callbacks run and output is kept; resolves like {@link wait}. */
  follow(): Promise<CommandFinished> {
    return this.stream.follow();
  }

  /** Yields output chunks, stdout and stderr interleaved in arrival order (see the class comment). */
  [Symbol.asyncIterator](): AsyncGenerator<OutputChunk> {
    const chunks = this.firstIterator ?? this.output.subscribe();
    this.firstIterator = undefined;
    void this.follow();
    return chunks;
  }

  /** Yields `{ stream, data }` log entries: the output as text, each stream decoded incrementally. */
  async *logs(): AsyncGenerator<CommandLog> {
    const decoder = new StreamDecoder(this.options.encoding);
    for await (const chunk of this) {
      const data = decoder.decode(chunk.stream, chunk.data);
      if (data !== "") yield { stream: chunk.stream, data };
    }
    for (const stream of ["stdout", "stderr"] as const) {
      const data = decoder.flush(stream);
      if (data !== "") yield { stream, data };
    }
  }

  /**
   * Sends `signal` (default SIGTERM) to the command's whole process group; the daemon escalates to
   * SIGKILL after the grace period. The handle does not reconnect after this; its stream ends
   * with the exit.
   */
  async kill(signal = "SIGTERM", options: KillOptions = {}): Promise<void> {
    this.stream.refuseReconnects();
    await this.record.started;
    try {
      const response = await this.context.client.killProcess({
        processId: this.id,
        signal,
        gracePeriodMs: options.gracePeriodMs ?? 0,
      });
      if (response.process !== undefined) this.record.adopt(detailsFromProto(response.process));
    } catch (error) {
      throw toSandboxError(error);
    }
  }

  /**
   * Writes `data` (text as UTF-8, or bytes) to the command's stdin (or its PTY) and resolves with
   * the acknowledgement. The command must have been started with `stdin: true` or `pty`.
   */
  sendInput(data: string | Uint8Array): Promise<InputAck> {
    return this.sendInputMessage({
      case: "data",
      value: typeof data === "string" ? new TextEncoder().encode(data) : data,
    });
  }

  /** Closes the command's stdin (end of input; ^D to a PTY). */
  closeInput(): Promise<InputAck> {
    return this.sendInputMessage({ case: "close", value: {} });
  }

  /** Resizes the command's PTY to `cols` columns and `rows` rows (each 1 to 10000: INVALID_ARGUMENT otherwise, before any call). */
  async resize(cols: number, rows: number): Promise<InputAck> {
    const problem = ptySizeProblem(cols, rows, "resize");
    if (problem !== undefined) throw new SandboxError(problem, "INVALID_ARGUMENT");
    return this.sendInputMessage({ case: "resize", value: { cols, rows } });
  }

  /**
   * Returns a new handle (of this handle's class) that resumes this command's stream exactly at
   * `lastStdoutOffset` and `lastStderrOffset`: iterating it yields only bytes from there on (what
   * this handle received past them but never yielded comes again), while its `result` also holds
   * the output this handle kept below them, under the same limit. A signal that kills the command
   * moves to the new handle. This handle stops following: its iterators end with a SandboxError of
   * code DETACHED.
   */
  async reconnect(): Promise<this> {
    await this.record.started;
    const killSignal = this.killSignal;
    this.detach();
    await this.stream.settled();
    const Handle = this.constructor as new (
      context: CommandContext,
      start: HandleStart,
      options: HandleOptions,
    ) => this;
    const start: HandleStart = {
      kind: "process",
      details: this.record.details!,
      from: this.output.resumeOffsets,
      retained: this.output.retained,
    };
    const next = new Handle(this.context, start, this.options);
    if (killSignal !== undefined) next.killOnAbort(killSignal);
    return next;
  }

  /**
   * Stops following the command and closes its input stream (even one still opening); the command
   * keeps running. Input sent through this handle afterwards is refused with a SandboxError DETACHED.
   */
  detach(): void {
    this.stream.stop(new SandboxError("the handle was detached from its command", "DETACHED"));
    this.input?.close();
  }

  /** Refreshes the status from the daemon; keeps the last known one once the record is gone. */
  async getStatus(): Promise<ProcessStatus> {
    await this.record.started;
    try {
      const { process } = await this.context.client.getProcess({ processId: this.id });
      if (process !== undefined) this.record.adopt(detailsFromProto(process));
    } catch (error) {
      const failure = toSandboxError(error);
      if (!(failure.reason === "PROCESS_NOT_FOUND" && this.record.exit !== undefined)) throw failure;
    }
    return this.status;
  }

  /**
   * The output the daemon still retains for this process, as text (one GetProcessLogs call): each
   * stream's head and tail, and the gap between them, if any, in `dropped`.
   */
  async getLogs(): Promise<ProcessLogs> {
    await this.record.started;
    return readProcessLogs(this.context, this.id, this.options.encoding);
  }

  /**
   * Waits until `port` answers inside the sandbox, as the Cloudflare Sandbox SDK's
   * `process.waitForPort(port, options)`: by default an HTTP GET of `path` (`/`) answered with a
   * `status` from 200 to 399, `mode: "tcp"` a connection; checked by the daemon from inside the
   * sandbox. Fails at once with a ProcessExitedBeforeReadyError (the exit, the last output lines)
   * when this process exits first, with a ProcessReadyTimeoutError on `timeout` (milliseconds).
   * `signal` stops the wait, and the daemon's probing.
   */
  async waitForPort(port: number, options: WaitForPortOptions = {}): Promise<PortReady> {
    await this.record.started;
    return readiness.waitForPort(this.context.client, port, { ...options, processId: this.id });
  }

  /**
   * Waits until a line of this process's output matches `pattern` (a string as it is, or a RegExp
   * without the `i`/`u` flags) and resolves with the line and, for a RegExp, its match, as the
   * Cloudflare Sandbox SDK's `process.waitForLog(pattern, timeout)` (a number is the timeout in
   * milliseconds). A line printed before the call counts: the daemon searches what it retains
   * first. Fails with a ProcessExitedBeforeReadyError once the output ends without a match, with a
   * ProcessReadyTimeoutError on `timeout`.
   */
  async waitForLog(pattern: string | RegExp, options: WaitForLogOptions | number = {}): Promise<WaitForLogResult> {
    await this.record.started;
    const bounds = typeof options === "number" ? { timeout: options } : options;
    return readiness.waitForLog(this.context.client, this.id, pattern, bounds);
  }

  /**
   * Waits until this process exits and resolves with how it ended (its `exitCode`, as the
   * Cloudflare Sandbox SDK's `process.waitForExit(timeout)`; a number is the timeout in
   * milliseconds): one call, without following the output. Rejects with a ProcessReadyTimeoutError
   * on `timeout`, the process running on.
   */
  async waitForExit(options: WaitForExitOptions | number = {}): Promise<ProcessExit> {
    await this.record.started;
    const bounds = typeof options === "number" ? { timeout: options } : options;
    const { exit, details } = await readiness.waitForExit(this.context.client, this.id, bounds);
    if (details !== undefined) this.record.adopt(details);
    else this.record.exited(exit);
    return exit;
  }

  /** Detaches (see {@link detach}); for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.detach();
  }

  /**
   * Kills the command (SIGTERM, SIGKILL a second later) when `signal` aborts, until this handle is
   * done with it: the listener goes once the handle's stream settles (the exit, a detach, a
   * failure); reconnect() hands it to the new handle. Following does not start because of it.
   * @internal Used by the command core.
   */
  killOnAbort(signal: AbortSignal): void {
    this.killSignal = signal;
    this.untilSettled(
      onAbort(signal, () => void this.kill("SIGTERM", { gracePeriodMs: 1000 }).catch(() => {})).dispose,
    );
  }

  /** Stops following with the signal's reason when it aborts (an Exec command then dies with its call). */
  private stopOnAbort(signal: AbortSignal): void {
    this.untilSettled(onAbort(signal, (reason) => this.stream.stop(reason)).dispose);
  }

  private untilSettled(release: () => void): void {
    if (this.stream.state.t === "exited" || this.stream.state.t === "failed" || this.stream.state.t === "stopped")
      release();
    else this.whenSettled.push(release);
  }

  private async sendInputMessage(input: Parameters<InputStream["send"]>[0]): Promise<InputAck> {
    await this.record.started;
    // After detach() nothing would close a new input stream: it would outlive the handle.
    if (this.stream.state.t === "stopped")
      throw new SandboxError("the handle was detached from its command", "DETACHED");
    this.input ??= new InputStream(this.context.client, this.id);
    return this.input.send(input);
  }

  /** The stream reached its end: iterators end, callers' signals are let go, input closes on a stop. */
  private settled(state: SettledState): void {
    for (const release of this.whenSettled.splice(0)) release();
    if (state.t === "exited") {
      this.output.close();
      return;
    }
    const error = state.t === "failed" ? state.error : state.reason;
    this.output.close(error);
    this.record.failStart(error);
    if (state.t === "failed") this.options.onError?.(state.error);
    else this.input?.close();
  }

  /** Applies one event of the stream; returns the result at the exit. */
  private async apply(event: CommandEvent, signal: AbortSignal): Promise<CommandFinished | undefined> {
    switch (event.kind) {
      case "process":
        this.record.adopt(detailsFromProto(event.info));
        return undefined;
      case "output":
        await this.output.deliver(event.chunk, signal);
        return undefined;
      case "gap":
        this.output.gap(event.stream, event.offset, event.missedBytes);
        return undefined;
      case "exited": {
        const exit = exitFromProto(event.exited);
        if (exit === undefined) throw new SandboxError("the command ended without an exit code or a signal", "NO_EXIT");
        this.record.exited(exit);
        this.output.flushText();
        this.options.onExit?.(exit.exitCode);
        const { retained } = this.output;
        const finished = new CommandFinished(
          this.id,
          this.command,
          exit,
          retained.retained(),
          this.options.encoding,
          retained.droppedBytes,
          retained.gaps,
        );
        // The result joined the output once; what the handle keeps becomes views of it.
        retained.shareWith(finished.chunks);
        return finished;
      }
      case "caught-up":
        throw new SandboxError("the log stream stopped before the command exited", "NO_EXIT");
    }
  }
}

/**
 * ProcessLogs is what the daemon keeps of a process's output, as text: per stream its first bytes
 * (the head) and its last (the tail), with at most one gap between them that `dropped` names.
 */
export interface ProcessLogs {
  /** Standard output kept: the head, then the tail where `dropped` names a gap of stdout between them. */
  stdout: string;
  /** Standard error kept, as `stdout`. */
  stderr: string;
  /** The gaps, stdout's first: where each stream's head ends (its byte offset) and how many bytes are missing. */
  dropped: readonly OutputGap[];
}

/** Reads what the daemon retains of a process's output, as text: one GetProcessLogs call. */
export async function readProcessLogs(
  context: CommandContext,
  processId: string,
  encoding?: string,
): Promise<ProcessLogs> {
  try {
    const logs = await context.client.getProcessLogs({ processId });
    // The head and the tail are decoded apart: a character cut by the gap is never glued together.
    const text = (stream: OutputStreamName, head: Uint8Array | undefined, tail: Uint8Array) => {
      const decoder = new StreamDecoder(encoding);
      const before =
        head === undefined || head.length === 0 ? "" : decoder.decode(stream, head) + decoder.flush(stream);
      return before + decoder.decode(stream, tail) + decoder.flush(stream);
    };
    return {
      stdout: text("stdout", logs.head?.stdout, logs.stdout),
      stderr: text("stderr", logs.head?.stderr, logs.stderr),
      dropped: (logs.head?.dropped ?? []).map(gapFromProto),
    };
  } catch (error) {
    throw toSandboxError(error);
  }
}
