import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { ExecRequestSchema, ProcessInfo, SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { abortableDelay, ChunkQueue, raceAbort } from "./chunk-queue.js";
import { CommandFinished } from "./command-finished.js";
import { createExecSource, createLogsSource, type CommandEvent, type CommandSource } from "./command-source.js";
import { ExecutionTimeoutError, OutputLostError, SandboxError, toSandboxError } from "./errors.js";
import { InputStream, type InputAck } from "./input-stream.js";
import { StreamDecoder, type OutputChunk, type OutputOffsets, type OutputStreamName } from "./output.js";
import { detailsFromProto, exitFromProto, type ProcessDetails, type ProcessExit, type ProcessStatus } from "./process-record.js";
import { RetainedOutput } from "./retained-output.js";

/** What a handle needs from the sandbox that made it. */
export interface CommandContext {
  /** The generated client. */
  readonly client: Client<typeof SandboxService>;
  /** Graceful GOAWAY frames received so far on the client's connection (see SandboxConnection). */
  readonly goAwayCount: () => number;
}

/** Callbacks of a {@link CommandHandle}; they run on the handle's stream, so only once it is consumed or `follow`ed. */
export interface CommandCallbacks {
  /** Text the command printed, decoded incrementally per stream (never a split character). */
  onOutput?: (stream: OutputStreamName, data: string) => void;
  /** The command exited; `code` as in CommandFinished.exitCode, null when no exit code was reported. */
  onExit?: (code: number | null) => void;
  /** The handle's stream failed for good (a lasting connection failure, lost output). */
  onError?: (error: Error) => void;
}

/** Options of the handle itself. */
export interface CommandHandleOptions extends CommandCallbacks {
  /** Encoding of the text views (`logs()`, `onOutput`, CommandFinished). Default `"utf-8"`. */
  encoding?: string;
  /**
   * Most output bytes (both streams together) the handle keeps for `result`. Beyond it the oldest
   * chunks are dropped and the CommandFinished says so (`truncated`, `droppedBytes`); iterators,
   * `logs()` and `onOutput` still see every byte as it arrives. Default: unlimited for a command
   * run through Exec (exec, execStream, waiting run and runCommand: the result is the point),
   * {@link DEFAULT_MAX_RETAINED_BYTES} for a background process, which may print for days.
   * 0 keeps nothing.
   */
  maxRetainedBytes?: number;
}

/** Default {@link CommandHandleOptions.maxRetainedBytes} of a background process's handle: 16 MiB. */
export const DEFAULT_MAX_RETAINED_BYTES = 16 * 1024 * 1024;

/** A log line of seed 003's `command.logs()`: decoded text of one stream. */
export interface CommandLog {
  /** The stream it came from. */
  stream: OutputStreamName;
  /** The text (as it arrived; not split into lines). */
  data: string;
}

/** Options of {@link CommandHandle.wait}. */
export interface WaitOptions {
  /** Stops waiting (not the command) when aborted; the wait rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Stops waiting (not the command) after this many milliseconds with ExecutionTimeoutError. */
  timeout?: number;
}

/** Options of {@link CommandHandle.kill}. */
export interface KillOptions {
  /** Milliseconds before the daemon escalates to SIGKILL; 5000 by default, never when negative. */
  gracePeriodMs?: number;
}

/** Where a handle starts: a fresh Exec, or a known process read from offsets. */
type HandleStart =
  | { kind: "exec"; request: MessageInitShape<typeof ExecRequestSchema> }
  | { kind: "process"; details: ProcessDetails; from?: OutputOffsets; retained?: RetainedOutput };

/** Queue capacity of one iterator, in bytes: beyond it the stream is held back (backpressure). */
const iteratorCapacityBytes = 4 * 1024 * 1024;

/**
 * CommandHandle is a live handle to one command in the sandbox, the single core every other view
 * (ExecResult, execStream events, seed 000's Process, seed 003's Command and CommandFinished) is
 * built on.
 *
 * - Iterating it (`for await (const chunk of handle)`) yields {@link OutputChunk}s of stdout and
 *   stderr interleaved in arrival order, each with its byte offset. Several iterators may run; one
 *   that starts late first gets the chunks this handle already received. Leaving the loop early detaches that
 *   iterator only; the command keeps running.
 * - `result` / `wait()` resolve with a {@link CommandFinished} once the command exits.
 * - `logs()` yields `{ stream, data }` text, `kill(signal = "SIGTERM")` signals the process group,
 *   `sendInput`/`closeInput`/`resize` go over one SendInput stream.
 *
 * A handle of a background process follows it through StreamLogs and reconnects on its own after a
 * transient failure (UNAVAILABLE, a reset connection, the daemon going away), resuming from
 * `lastStdoutOffset`/`lastStderrOffset`: at once after a graceful GOAWAY, otherwise after an
 * exponential backoff of BACKOFF_BASE·2ⁿ milliseconds capped at BACKOFF_MAX, for at most
 * MAX_AUTO_RECONNECTS consecutive failures (the count restarts once the stream delivers again);
 * never after `kill()`. Bytes below the handle's offsets are skipped, so none is duplicated; bytes
 * the daemon no longer retains end the stream with {@link OutputLostError} rather than silently.
 * A lasting failure ends it with a {@link SandboxError}, never a hang.
 *
 * A handle of a command run through Exec (exec(), execStream(), blocking runCommand) cannot resume:
 * the daemon kills an Exec command whose call is gone, so a broken connection is a SandboxError
 * with code UNAVAILABLE.
 *
 * The handle keeps the output it received for `result`: all of it for an Exec command, the newest
 * {@link DEFAULT_MAX_RETAINED_BYTES} for a background process unless `maxRetainedBytes` says
 * otherwise, so following a days-long log does not grow memory without bound. A late iterator
 * replays only what is still kept.
 */
export class CommandHandle implements AsyncIterable<OutputChunk>, AsyncDisposable {
  /** Consecutive failed reconnect attempts before the handle gives up. */
  static MAX_AUTO_RECONNECTS = 5;
  /** First backoff delay in milliseconds; doubled on each consecutive failure. */
  static BACKOFF_BASE = 500;
  /** Largest backoff delay in milliseconds. */
  static BACKOFF_MAX = 10_000;

  private details?: ProcessDetails;
  private exitRecord?: ProcessExit;
  private failure?: Error;
  private readonly offsets: OutputOffsets;
  /** What `result` will hold; chunks carried over from an earlier handle are never replayed to iterators. */
  private readonly output: RetainedOutput;
  private readonly source: CommandSource;
  private readonly subscribers = new Set<ChunkQueue<OutputChunk>>();
  private readonly stopper = new AbortController();
  private readonly decoder?: StreamDecoder;
  private readonly started: Promise<void>;
  private markStarted!: () => void;
  private failStart!: (error: unknown) => void;
  private pumping?: Promise<CommandFinished>;
  private settled = false;
  private killRequested = false;
  private detached = false;
  private input?: InputStream;
  private reconnectCount = 0;

  private constructor(
    private readonly context: CommandContext,
    start: HandleStart,
    private readonly options: CommandHandleOptions,
  ) {
    this.started = new Promise<void>((resolve, reject) => {
      this.markStarted = resolve;
      this.failStart = reject;
    });
    this.started.catch(() => {});
    if (options.onOutput !== undefined) this.decoder = new StreamDecoder(options.encoding);
    if (start.kind === "exec") {
      this.source = createExecSource(context.client, start.request);
      this.offsets = { stdout: 0, stderr: 0 };
      this.output = new RetainedOutput(options.maxRetainedBytes ?? Infinity);
    } else {
      this.source = createLogsSource(context.client, start.details.id);
      this.offsets = { ...(start.from ?? { stdout: 0, stderr: 0 }) };
      this.output = new RetainedOutput(options.maxRetainedBytes ?? start.retained?.limitBytes ?? DEFAULT_MAX_RETAINED_BYTES, start.retained);
      this.adopt(start.details);
    }
  }

  /**
   * Runs a command through Exec and resolves with its handle once the daemon reports it started;
   * rejects with a SandboxError when the daemon refuses it. Aborting `signal` later cancels the
   * call, which kills the command.
   * @internal Used by the Sandbox.
   */
  static async exec(
    context: CommandContext,
    request: MessageInitShape<typeof ExecRequestSchema>,
    options: CommandHandleOptions & { signal?: AbortSignal } = {},
  ): Promise<CommandHandle> {
    const handle = new CommandHandle(context, { kind: "exec", request }, options);
    if (options.signal !== undefined) handle.abortWith(options.signal);
    void handle.follow();
    await handle.started;
    return handle;
  }

  /**
   * Creates a handle of a known process whose stream starts at `from` (0, 0 by default) when first
   * consumed; `retained` are chunks already received before `from`.
   * @internal Used by the Sandbox.
   */
  static forProcess(
    context: CommandContext,
    info: ProcessInfo | ProcessDetails,
    options: CommandHandleOptions & { from?: OutputOffsets; retained?: RetainedOutput } = {},
  ): CommandHandle {
    const details = "processId" in info ? detailsFromProto(info) : info;
    return new CommandHandle(context, { kind: "process", details, from: options.from, retained: options.retained }, options);
  }

  /** The process id (client-chosen or a UUID). */
  get id(): string {
    return this.details?.id ?? "";
  }

  /** The process id; the same as {@link id}, named as seed 001 names it. */
  get commandId(): string {
    return this.id;
  }

  /** Operating-system pid on the sandbox, also its process group id; undefined if never spawned. */
  get pid(): number | undefined {
    return this.details?.pid;
  }

  /** The command as given (without its arguments). */
  get command(): string {
    return this.details?.command ?? "";
  }

  /** The arguments as given, for argv form. */
  get args(): readonly string[] {
    return this.details?.args ?? [];
  }

  /** Session the process belongs to, if any. */
  get sessionId(): string | undefined {
    return this.details?.sessionId;
  }

  /** Status as last seen by this handle (its stream or `getStatus()`). */
  get status(): ProcessStatus {
    return this.exitRecord?.status ?? this.details?.status ?? "starting";
  }

  /** When the process started. */
  get startTime(): Date {
    return this.details?.startTime ?? new Date(0);
  }

  /** When the process ended, once known. */
  get endTime(): Date | undefined {
    return this.exitRecord?.endTime;
  }

  /** The exit code once known (128 + signal number for a signal), else undefined. */
  get exitCode(): number | undefined {
    return this.exitRecord?.exitCode;
  }

  /** How the process ended, once known. */
  get exit(): ProcessExit | undefined {
    return this.exitRecord;
  }

  /** Offset after the last stdout byte this handle received: where a reconnect resumes. */
  get lastStdoutOffset(): number {
    return this.offsets.stdout;
  }

  /** Offset after the last stderr byte this handle received: where a reconnect resumes. */
  get lastStderrOffset(): number {
    return this.offsets.stderr;
  }

  /** How many times this handle reconnected on its own. */
  get autoReconnects(): number {
    return this.reconnectCount;
  }

  /** The final result; reading it starts following the command (see {@link wait}). */
  get result(): Promise<CommandFinished> {
    return this.follow();
  }

  /**
   * Waits for the command to exit and resolves with a {@link CommandFinished}; rejects with a
   * SandboxError when the stream fails for good. `signal` and `timeout` bound the wait only.
   */
  async wait(options: WaitOptions = {}): Promise<CommandFinished> {
    let waiting = this.follow();
    if (options.timeout !== undefined) {
      const timeout = options.timeout;
      const deadline = AbortSignal.timeout(timeout);
      waiting = raceAbort(waiting, deadline).catch((error: unknown) => {
        throw deadline.aborted && error === deadline.reason ? new ExecutionTimeoutError(timeout) : error;
      });
    }
    return raceAbort(waiting, options.signal);
  }

  /**
   * Starts following the command's stream if it is not followed yet, so callbacks run and output
   * is retained; resolves like {@link wait}.
   */
  follow(): Promise<CommandFinished> {
    if (this.pumping === undefined) {
      this.pumping = this.pump().then(
        (finished) => {
          this.settled = true;
          for (const queue of this.subscribers) queue.end();
          return finished;
        },
        (error: unknown) => {
          const failure = error instanceof Error ? error : toSandboxError(error);
          this.settled = true;
          this.failure = failure;
          this.failStart(failure);
          for (const queue of this.subscribers) queue.end(failure);
          const detached = failure instanceof SandboxError && failure.code === "DETACHED";
          if (!detached) this.options.onError?.(failure);
          throw failure;
        },
      );
      this.pumping.catch(() => {});
    }
    return this.pumping;
  }

  /** Yields output chunks, stdout and stderr interleaved in arrival order (see the class comment). */
  async *[Symbol.asyncIterator](): AsyncGenerator<OutputChunk> {
    const queue = new ChunkQueue<OutputChunk>(iteratorCapacityBytes, (chunk) => chunk.data.length);
    // Subscribing and copying what was received happen in one step, so no chunk is missed or doubled.
    const replay = this.output.received();
    if (this.settled) {
      yield* replay;
      if (this.failure !== undefined) throw this.failure;
      return;
    }
    this.subscribers.add(queue);
    try {
      void this.follow();
      yield* replay;
      yield* queue;
    } finally {
      this.subscribers.delete(queue);
      // The consumer may leave while still replaying, before the queue's own iterator ran (and its
      // finally ended it): a push parked on a full queue must be released, or deliver never returns.
      queue.end();
    }
  }

  /** Yields seed 003's `{ stream, data }` log entries: the output as text, per stream decoded incrementally. */
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
   * SIGKILL after the grace period. The handle will not reconnect after this. The stream then ends
   * with the exit.
   */
  async kill(signal = "SIGTERM", options: KillOptions = {}): Promise<void> {
    this.killRequested = true;
    await this.started;
    try {
      const response = await this.context.client.killProcess({ processId: this.id, signal, gracePeriodMs: options.gracePeriodMs ?? 0 });
      if (response.process !== undefined) this.adopt(detailsFromProto(response.process));
    } catch (error) {
      throw toSandboxError(error, { processId: this.id });
    }
  }

  /**
   * Writes `data` (text as UTF-8, or bytes) to the command's stdin (or its PTY) and resolves with
   * the acknowledgement. The command must have been started with `stdin` or `pty`.
   */
  sendInput(data: string | Uint8Array): Promise<InputAck> {
    return this.sendInputMessage({ case: "data", value: typeof data === "string" ? new TextEncoder().encode(data) : data });
  }

  /** Closes the command's stdin (EOF; ^D to a PTY). */
  closeInput(): Promise<InputAck> {
    return this.sendInputMessage({ case: "close", value: {} });
  }

  /** Resizes the command's PTY to `cols` columns and `rows` rows. */
  resize(cols: number, rows: number): Promise<InputAck> {
    return this.sendInputMessage({ case: "resize", value: { cols, rows } });
  }

  /**
   * Returns a new handle that resumes this command's stream exactly at `lastStdoutOffset` and
   * `lastStderrOffset`: iterating it yields only bytes from there on, while its `result` also holds
   * the output this handle kept (so it is complete unless `maxRetainedBytes` dropped some), under
   * the same limit.
   * This handle stops following: its iterators end with a SandboxError of code DETACHED.
   */
  async reconnect(): Promise<CommandHandle> {
    await this.started;
    this.detach();
    await this.pumping?.catch(() => {});
    return new CommandHandle(
      this.context,
      { kind: "process", details: this.details!, from: { ...this.offsets }, retained: this.output },
      this.options,
    );
  }

  /**
   * Stops following the command and closes its input stream (even one still opening); the command
   * keeps running. Input sent through this handle afterwards is refused with a SandboxError DETACHED.
   */
  detach(): void {
    this.detached = true;
    this.input?.close();
    if (!this.stopper.signal.aborted) this.stopper.abort(new SandboxError("the handle was detached from its command", "DETACHED"));
    this.started.catch(() => {});
  }

  /** Refreshes the status from the daemon; keeps the last known one once the record is gone. */
  async getStatus(): Promise<ProcessStatus> {
    await this.started;
    try {
      const { process } = await this.context.client.getProcess({ processId: this.id });
      if (process !== undefined) this.adopt(detailsFromProto(process));
    } catch (error) {
      if (!(ConnectError.from(error).code === Code.NotFound && this.exitRecord !== undefined)) {
        throw toSandboxError(error, { processId: this.id });
      }
    }
    return this.status;
  }

  /** The output the daemon still retains for this process, as text. */
  async getLogs(): Promise<{ stdout: string; stderr: string }> {
    await this.started;
    try {
      const logs = await this.context.client.getProcessLogs({ processId: this.id });
      const decoder = new StreamDecoder(this.options.encoding);
      return {
        stdout: decoder.decode("stdout", logs.stdout) + decoder.flush("stdout"),
        stderr: decoder.decode("stderr", logs.stderr) + decoder.flush("stderr"),
      };
    } catch (error) {
      throw toSandboxError(error, { processId: this.id });
    }
  }

  /** Detaches (see {@link detach}); for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.detach();
  }

  /** @internal Aborting `signal` cancels the handle's call (an Exec command is then killed). */
  abortWith(signal: AbortSignal): void {
    const abort = () => {
      if (!this.stopper.signal.aborted) this.stopper.abort(signal.reason);
    };
    if (signal.aborted) abort();
    else signal.addEventListener("abort", abort, { once: true });
  }

  private async sendInputMessage(input: Parameters<InputStream["send"]>[0]): Promise<InputAck> {
    await this.started;
    // After detach() nothing would close a new input stream: it would outlive the handle.
    if (this.detached) throw new SandboxError("the handle was detached from its command", "DETACHED");
    this.input ??= new InputStream(this.context.client, this.id);
    return this.input.send(input);
  }

  private adopt(details: ProcessDetails): void {
    this.details = details;
    if (details.exit !== undefined && this.exitRecord === undefined && details.status !== "running") this.exitRecord = details.exit;
    this.markStarted();
  }

  /** Reads the stream to the exit, reconnecting as the class comment says. */
  private async pump(): Promise<CommandFinished> {
    const stop = this.stopper.signal;
    let failures = 0;
    for (;;) {
      const goAways = this.context.goAwayCount();
      const call = new AbortController();
      const cancel = () => call.abort(stop.reason);
      if (stop.aborted) throw stop.reason;
      stop.addEventListener("abort", cancel, { once: true });
      try {
        for await (const event of this.source.open({ ...this.offsets }, call.signal)) {
          failures = 0;
          const finished = await this.apply(event, stop);
          if (finished !== undefined) return finished;
        }
        throw new SandboxError("the stream ended without the command's exit", "NO_EXIT");
      } catch (error) {
        if (stop.aborted) throw stop.reason;
        if (error instanceof SandboxError) throw error;
        const failure = classifyFailure(error, this.context.goAwayCount() !== goAways);
        if (failure === "fatal") throw toSandboxError(error, { processId: this.details?.id });
        if (!this.source.resumable) {
          throw new SandboxError("the connection to the sandbox was lost; the daemon ends an Exec command whose call is gone", "UNAVAILABLE", {
            cause: ConnectError.from(error),
          });
        }
        if (this.killRequested) throw toSandboxError(error, { processId: this.id });
        if (failures >= CommandHandle.MAX_AUTO_RECONNECTS) {
          throw new SandboxError(`gave up after ${failures} reconnect attempts: ${ConnectError.from(error).rawMessage}`, "UNAVAILABLE", {
            cause: ConnectError.from(error),
          });
        }
        failures++;
        const delay =
          failure === "going-away" ? 0 : Math.min(CommandHandle.BACKOFF_MAX, CommandHandle.BACKOFF_BASE * 2 ** (failures - 1));
        await abortableDelay(delay, stop);
        this.reconnectCount++;
      } finally {
        stop.removeEventListener("abort", cancel);
        call.abort();
      }
    }
  }

  /** Applies one event; returns the result on the exit. */
  private async apply(event: CommandEvent, stop: AbortSignal): Promise<CommandFinished | undefined> {
    switch (event.kind) {
      case "process":
        this.adopt(detailsFromProto(event.info));
        return undefined;
      case "output":
        await this.deliver(event.chunk, stop);
        return undefined;
      case "gap": {
        // Only bytes from our own offset on count as lost; the offset moves past them for reconnect().
        const end = event.offset + event.missedBytes;
        const from = Math.max(event.offset, this.offsets[event.stream]);
        if (end <= from) return undefined;
        this.offsets[event.stream] = end;
        throw new OutputLostError(event.stream, from, end - from);
      }
      case "exited": {
        const exit = exitFromProto(event.exited);
        if (exit === undefined) throw new SandboxError("the command ended without an exit code or a signal", "NO_EXIT");
        this.exitRecord = exit;
        if (this.details !== undefined) this.details = { ...this.details, status: exit.status, exit };
        this.flushDecoder();
        this.options.onExit?.(exit.exitCode);
        return new CommandFinished(this.id, this.command, exit, this.output.retained(), this.options.encoding, this.output.droppedBytes);
      }
      case "caught-up":
        throw new SandboxError("the log stream stopped before the command exited", "NO_EXIT");
    }
  }

  /** Hands a chunk to the result and every iterator, skipping bytes already received. */
  private async deliver(received: OutputChunk, stop: AbortSignal): Promise<void> {
    const expected = this.offsets[received.stream];
    const end = received.offset + received.data.length;
    if (end <= expected) return;
    if (received.offset > expected) {
      this.offsets[received.stream] = received.offset;
      throw new OutputLostError(received.stream, expected, received.offset - expected);
    }
    const chunk: OutputChunk =
      received.offset === expected
        ? received
        : { stream: received.stream, offset: expected, data: received.data.subarray(expected - received.offset) };
    this.offsets[chunk.stream] = end;
    this.output.push(chunk);
    const room = [...this.subscribers].map((queue) => queue.push(chunk));
    if (this.decoder !== undefined) {
      const text = this.decoder.decode(chunk.stream, chunk.data);
      if (text !== "") this.options.onOutput?.(chunk.stream, text);
    }
    await raceAbort(Promise.all(room), stop);
  }

  private flushDecoder(): void {
    if (this.decoder === undefined) return;
    for (const stream of ["stdout", "stderr"] as const) {
      const text = this.decoder.flush(stream);
      if (text !== "") this.options.onOutput?.(stream, text);
    }
  }
}

/** What a failed stream calls for: resume at once, resume after a backoff, or give up. */
export type FailureKind = "going-away" | "transient" | "fatal";

/**
 * Classifies a stream failure. Transient: UNAVAILABLE (refused stream, connection refused, the
 * daemon shutting down), ABORTED and CANCELED not asked for by this client (a connection reset or
 * destroyed under the call) and INTERNAL errors of the HTTP/2 layer itself (a stream or connection
 * closed with an error code) and a response cut short (no end-of-stream message, trailer or status,
 * whatever its code). It is `going-away` when a graceful GOAWAY
 * arrived while the stream was open. Everything else (NOT_FOUND, PERMISSION_DENIED, ...) is fatal.
 */
export function classifyFailure(error: unknown, sawGoAway: boolean): FailureKind {
  const connectError = ConnectError.from(error);
  const transient =
    connectError.code === Code.Unavailable ||
    connectError.code === Code.Aborted ||
    connectError.code === Code.Canceled ||
    (connectError.code === Code.Internal && isTransportFailure(connectError)) ||
    // A response cut short: connect-es names the part that never came, under various codes.
    /^protocol error: missing (EndStreamResponse|trailer|status)/.test(connectError.rawMessage);
  if (!transient) return "fatal";
  return sawGoAway ? "going-away" : "transient";
}

/** Whether an INTERNAL error came from the connection rather than from the daemon's handler. */
function isTransportFailure(error: ConnectError): boolean {
  if (/http\/2|stream closed|premature|socket|ECONNRESET|EPIPE|protocol error|missing trailer|incomplete|closed early/i.test(error.rawMessage)) return true;
  for (let cause: unknown = error.cause; cause instanceof Error; cause = cause.cause) {
    if ("code" in cause && typeof cause.code === "string" && /^(ECONNRESET|EPIPE|ERR_HTTP2_|ERR_STREAM_PREMATURE_CLOSE)/.test(cause.code)) return true;
  }
  return false;
}
