import {
  type CommandFinished,
  checkOptions,
  commandOptionNames,
  optionNames,
  type CommandOptions,
  ExecutionTimeoutError,
  SandboxError,
  toSandboxError,
  launch,
  type LaunchContext,
  StreamDecoder,
  type OutputGap,
  type OutputStreamName,
  commandLine,
  type ResourceUsage,
} from "../core/index.js";
import { linkSignals } from "../../shared/abort.js";
import type { ExitCause } from "../../shared/exit-cause.js";

/**
 * The options every Cloudflare-style call takes, as that SDK's `BaseExecOptions`: the command's
 * options with its time limit named `timeout` (in milliseconds, as there), plus argv form, PTY,
 * stdin input, sudo and the command's own resource limits.
 */
export interface BaseExecOptions
  extends Pick<
    CommandOptions,
    "sessionId" | "env" | "cwd" | "encoding" | "args" | "pty" | "sudo" | "input" | "limits" | "retention"
  > {
  /**
   * Maximum execution time in milliseconds; 0 for none. exec() and execStream() default to the
   * sandbox's `timeoutMs`, background processes to none.
   */
  timeout?: number;
}

/** Options of `exec()`, as the Cloudflare Sandbox SDK's `ExecOptions`. */
export interface ExecOptions extends BaseExecOptions {
  /** Streams output through the callbacks as it arrives; `onComplete` is called only with it. */
  stream?: boolean;
  /** Text as it arrives, per stream, decoded incrementally (never a split character). */
  onOutput?: (stream: OutputStreamName, data: string) => void;
  /** The result, when `stream` is true. */
  onComplete?: (result: ExecResult) => void;
  /** The error exec() is about to reject with. */
  onError?: (error: Error) => void;
  /** Aborting cancels the call, which kills the command's process group; exec() rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of `execStream()`, as the Cloudflare Sandbox SDK's `StreamOptions`. */
export interface StreamOptions extends BaseExecOptions {
  /**
   * Most output bytes (both streams together, the newest) the `complete` event's `result` keeps.
   * Default 0: a stream hands each byte over once and keeps none, so its memory stays flat however
   * much the command prints, and `result` has the exit but empty `stdout`, `stderr` and `output`.
   * `Infinity` keeps everything, as exec() does.
   */
  maxRetainedBytes?: number;
  /** Accepted as that SDK accepts it; chunks are as the daemon sends them. */
  bufferSize?: number;
  /** Aborting cancels the call and kills the command; the stream then yields an `error` event and ends. */
  signal?: AbortSignal;
}

/** The result of `exec(command, options)`, as the Cloudflare Sandbox SDK's `ExecResult`, plus `output` and `signal`. */
export interface ExecResult {
  /** Whether the command succeeded (exitCode === 0). */
  success: boolean;
  /** The exit code; 128 + the signal number when a signal ended the command. */
  exitCode: number;
  /** Standard output as text. */
  stdout: string;
  /** Standard error as text. */
  stderr: string;
  /** Both streams joined in arrival order. With `pty`, everything is here and in stdout. */
  output: string;
  /** Standard output bytes, exactly as written (the bytes view of `stdout`). */
  stdoutBytes: Buffer;
  /** Standard error bytes, exactly as written (the bytes view of `stderr`). */
  stderrBytes: Buffer;
  /** The command that was executed, with its arguments. */
  command: string;
  /** How long the command ran, in milliseconds. */
  duration: number;
  /** ISO timestamp of when the command started. */
  timestamp: string;
  /** Session the command ran in. */
  sessionId?: string;
  /** Name of the signal that ended the command (`"SIGTERM"`), undefined when it exited. */
  signal?: string;
  /** What the command's whole process tree used (CPU, peak memory, I/O), where the daemon can tell. */
  usage?: ResourceUsage;
  /** Why the command ended: `exited`, `signaled`, `killed_on_request`, `timed_out`, `out_of_memory`... (see ProcessExit.cause). */
  cause: ExitCause;
  /**
   * Output this result lacks, where: per stream the offset of the first byte missing and how many
   * are. Empty from exec(), which receives and keeps every byte; execStream()'s result keeps only
   * its `maxRetainedBytes`. What the daemon's record kept for later readers is in `getProcessLogs()`.
   */
  dropped: readonly OutputGap[];
}

/** The result of `exec(command, args, options)`, as the Together sandbox SDK's `exec()`: the exit code and the joined output. */
export interface ExecOutput {
  /** The exit code; 128 + the signal number when a signal ended the command (137 after a timeout). */
  exitCode: number;
  /** Both streams joined in arrival order. */
  output: string;
}

/** One event of `execStream()`, as the Cloudflare Sandbox SDK's `ExecEvent`: `start`, `stdout`/`stderr` text, then `complete` or `error`. */
export interface ExecEvent {
  /** What happened. */
  type: "start" | "stdout" | "stderr" | "complete" | "error";
  /** ISO timestamp of the event. */
  timestamp: string;
  /**
   * The text, for stdout and stderr (decoded across chunks: a character split between two comes
   * whole). Decoded when first read, then kept: a loop that reads only `bytes` builds no string.
   */
  data?: string;
  /**
   * The bytes, for stdout and stderr, exactly as written; the text view is `data`. An event whose
   * bytes end inside a character carries them here and that character's text in a later event.
   */
  bytes?: Buffer;
  /** The command, for start. */
  command?: string;
  /** The exit code, for complete. */
  exitCode?: number;
  /** The result, for complete. */
  result?: ExecResult;
  /** The failure, for error. */
  error?: Error;
}

/** The field names of {@link BaseExecOptions}. */
export const baseExecOptionNames = optionNames<BaseExecOptions>({
  sessionId: true,
  env: true,
  cwd: true,
  encoding: true,
  args: true,
  pty: true,
  sudo: true,
  input: true,
  limits: true,
  retention: true,
  timeout: true,
});
const execOptionNames = optionNames<ExecOptions>({
  ...baseExecOptionNames,
  stream: true,
  onOutput: true,
  onComplete: true,
  onError: true,
  signal: true,
});
const streamOptionNames = optionNames<StreamOptions>({
  ...baseExecOptionNames,
  bufferSize: true,
  signal: true,
  maxRetainedBytes: true,
});
const { args: _args, ...argvExecOptionNames } = commandOptionNames;

/** The command's options for a Cloudflare-style call: `timeout` is the core's `timeoutMs`. */
export function fromBaseExecOptions<T extends BaseExecOptions>(
  options: T,
): Omit<T, "timeout"> & Pick<CommandOptions, "timeoutMs"> {
  const { timeout, ...rest } = options;
  return { ...rest, timeoutMs: timeout };
}

/**
 * Runs a command and waits for it, in either of two shapes:
 * - `exec(command, options?)`, as the Cloudflare Sandbox SDK's: resolves with an
 *   {@link ExecResult} whatever the exit code; rejects with {@link ExecutionTimeoutError} when the
 *   time limit killed the command (`timeout`, in milliseconds; by default the sandbox's `timeoutMs`,
 *   30 s unless `connect()` said otherwise; 0 for none): its message names the limit and its source, with a SandboxError when the daemon refuses it or the stream
 *   ends without an exit, and with `signal`'s reason when aborted (the command is killed).
 * - `exec(command, args, options?)`, as the Together sandbox SDK's: resolves with
 *   `{ exitCode, output }` whatever the exit code (a command killed by the time limit, `timeoutMs`
 *   or by default the sandbox's 30 s, has 137);
 *   rejects when there is no exit code to give.
 * A second argument of any other shape is a SandboxError INVALID_ARGUMENT.
 */
export async function exec(
  context: LaunchContext,
  command: string,
  second?: ExecOptions | readonly string[],
  third?: Omit<CommandOptions, "args">,
): Promise<ExecResult | ExecOutput> {
  if (Array.isArray(second)) {
    checkOptions(third, argvExecOptionNames, "exec(command, args, options)");
    const finished = await (await launch(context, command, { ...third, args: second }, "wait")).result;
    return { exitCode: finished.exitCode, output: finished.output() };
  }
  if (third !== undefined)
    throw new SandboxError(
      "exec(command, options) takes no third argument; arguments go in an array: exec(command, args, options)",
      "INVALID_ARGUMENT",
    );
  checkOptions(second, execOptionNames, "exec(command, options)");
  return execWithResult(context, command, (second ?? {}) as ExecOptions);
}

async function execWithResult(context: LaunchContext, command: string, options: ExecOptions): Promise<ExecResult> {
  const { stream, onComplete, onError, ...rest } = options;
  const timeoutMs = options.timeout ?? context.defaults.timeoutMs;
  try {
    const handle = await launch(context, command, fromBaseExecOptions(rest), "wait");
    const finished = await handle.result;
    if (finished.timedOut) throw commandTimedOut(timeoutMs, options.timeout !== undefined, "exec");
    const result = toExecResult(finished, commandLine(handle), handle.sessionId);
    if (stream === true) onComplete?.(result);
    return result;
  } catch (error) {
    const failure: Error = options.signal?.aborted ? options.signal.reason : toSandboxError(error);
    onError?.(failure);
    throw failure;
  }
}

/**
 * Runs a command as an async iterable of {@link ExecEvent}s, as the Cloudflare Sandbox SDK's
 * `execStream()`: `start`, `stdout`/`stderr` text, then `complete` with the result, or one `error`
 * event that ends the stream (an {@link ExecutionTimeoutError} naming the limit when the time limit
 * killed the command: `timeout`, in milliseconds, by default the sandbox's `timeoutMs`, 30 s). Leaving the loop early cancels the call, which kills the command.
 * It keeps none of the output it handed over unless `maxRetainedBytes` asks it to.
 */
export async function* execStream(
  context: LaunchContext,
  command: string,
  options: StreamOptions = {},
): AsyncGenerator<ExecEvent> {
  checkOptions(options, streamOptionNames, "execStream");
  const { bufferSize: _bufferSize, maxRetainedBytes = 0, ...rest } = options;
  const stop = linkSignals(options.signal);
  const timeoutMs = options.timeout ?? context.defaults.timeoutMs;
  const now = () => new Date().toISOString();
  let failure: Error | undefined;
  try {
    const handle = await launch(
      context,
      command,
      { ...fromBaseExecOptions(rest), maxRetainedBytes, signal: stop.signal },
      "stream",
    );
    yield { type: "start", timestamp: now(), command: commandLine(handle) };
    const decoder = new StreamDecoder(options.encoding);
    for await (const chunk of handle) {
      yield outputEvent(chunk.stream, now(), decoder.decodeLater(chunk.stream, chunk.data), chunk.data);
    }
    for (const stream of ["stdout", "stderr"] as const) {
      const data = decoder.flush(stream);
      if (data !== "") yield { type: stream, timestamp: now(), data, bytes: Buffer.alloc(0) };
    }
    const finished = await handle.result;
    if (finished.timedOut) throw commandTimedOut(timeoutMs, options.timeout !== undefined, "execStream");
    const result = toExecResult(finished, commandLine(handle), handle.sessionId);
    yield { type: "complete", timestamp: now(), exitCode: result.exitCode, result };
  } catch (error) {
    failure = options.signal?.aborted ? options.signal.reason : toSandboxError(error);
  } finally {
    // Leaving the loop early (or failing) cancels the call, which kills the command; after the exit it does nothing.
    stop.abort(new SandboxError("the stream was left early", "CANCELED"));
  }
  if (failure !== undefined) yield { type: "error", timestamp: now(), error: failure };
}

/**
 * A stdout or stderr event whose `data` is decoded when first read (then kept, and assignable): a
 * caller that reads only `bytes` (output streamed to a file) makes no string of it.
 */
function outputEvent(type: "stdout" | "stderr", timestamp: string, text: () => string, bytes: Buffer): ExecEvent {
  return {
    type,
    timestamp,
    get data(): string {
      const value = text();
      // Kept from now on, where the event may still change (not frozen or sealed: then decoded at each read).
      if (Object.isExtensible(this))
        Object.defineProperty(this, "data", { value, writable: true, enumerable: true, configurable: true });
      return value;
    },
    set data(value: string) {
      Object.defineProperty(this, "data", { value, writable: true, enumerable: true, configurable: true });
    },
    bytes,
  };
}

/**
 * The ExecutionTimeoutError of a command its time limit killed, naming the limit, its unit and where
 * it came from: the call's `timeout`, or the sandbox's default for waiting calls and how to lift it.
 */
export function commandTimedOut(timeoutMs: number, given: boolean, call: string): ExecutionTimeoutError {
  const message = given
    ? `the command ran past its time limit and was killed (SIGKILL): timeout ${timeoutMs} ms, the timeout option of ${call} (in milliseconds)`
    : `the command ran past its time limit and was killed (SIGKILL): ${timeoutMs} ms, the sandbox's default for waiting calls ` +
      `(give ${call} a timeout in milliseconds, or connect({ timeoutMs }) for the whole sandbox; 0 for none)`;
  return new ExecutionTimeoutError(timeoutMs, { message });
}

/**
 * Converts a finished command to an ExecResult. Its text fields are decoded when first read (then
 * kept): a result whose text nobody reads holds its output once, as bytes, not as bytes and text.
 */
export function toExecResult(finished: CommandFinished, command: string, sessionId: string | undefined): ExecResult {
  // An unknown encoding is refused now, not when the text is first read.
  new StreamDecoder(finished.encoding);
  return {
    success: finished.exitCode === 0,
    exitCode: finished.exitCode,
    get stdout() {
      return finished.stdout();
    },
    set stdout(value: string) {
      overwrite(this, "stdout", value);
    },
    get stderr() {
      return finished.stderr();
    },
    set stderr(value: string) {
      overwrite(this, "stderr", value);
    },
    get output() {
      return finished.output();
    },
    set output(value: string) {
      overwrite(this, "output", value);
    },
    stdoutBytes: asBuffer(finished.stdoutBytes()),
    stderrBytes: asBuffer(finished.stderrBytes()),
    command,
    duration: finished.exit.durationMs,
    timestamp: finished.exit.startTime.toISOString(),
    sessionId,
    signal: finished.signal,
    usage: finished.exit.usage,
    cause: finished.cause,
    dropped: finished.dropped,
  };
}

/** Replaces a result's decoded-on-read field with a plain value, as assigning a plain field would. */
function overwrite(result: ExecResult, name: "stdout" | "stderr" | "output", value: string): void {
  Object.defineProperty(result, name, { value, writable: true, enumerable: true, configurable: true });
}

/** A Buffer over the same memory as `bytes`. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
