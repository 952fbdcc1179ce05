import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ExecRequestSchema } from "../../gen/sandbox/v1/sandbox_pb.js";
import type { CommandFinished } from "./command-finished.js";
import { CommandHandle, type CommandContext } from "./command-handle.js";
import type { CommandOptions } from "./command-spec.js";
import { toSandboxError } from "./errors.js";
import { StreamDecoder, type OutputStreamName } from "./output.js";

/** Options of `exec()` (seed 000's ExecOptions, plus argv form, PTY, stdin and sudo). */
export interface ExecOptions extends CommandOptions {
  /** Stream output through the callbacks as it arrives; `onComplete` is called only with it. */
  stream?: boolean;
  /** Text as it arrives, per stream, decoded incrementally (never a split character). */
  onOutput?: (stream: OutputStreamName, data: string) => void;
  /** The result, when `stream` is true. */
  onComplete?: (result: ExecResult) => void;
  /** The error exec() is about to reject with. */
  onError?: (error: Error) => void;
  /** Aborting cancels the call, which kills the command's process group; exec() rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Text (as UTF-8) or bytes written to the command's stdin, which is then closed. */
  stdin?: string | Uint8Array;
}

/** Options of `execStream()` (seed 000's StreamOptions). */
export interface StreamOptions extends CommandOptions {
  /** Accepted for compatibility with seed 000; chunks are as the daemon sends them. */
  bufferSize?: number;
  /** Aborting cancels the call and kills the command; the stream then yields an `error` event and ends. */
  signal?: AbortSignal;
  /** Text (as UTF-8) or bytes written to the command's stdin, which is then closed. */
  stdin?: string | Uint8Array;
}

/** ExecResult is the result of `exec()`: a view of the command's CommandFinished. */
export interface ExecResult {
  /** Whether the command succeeded (exitCode === 0). */
  success: boolean;
  /** The exit code; 128 + the signal number when a signal ended the command (137 after a timeout). */
  exitCode: number;
  /** Standard output as text. */
  stdout: string;
  /** Standard error as text. */
  stderr: string;
  /** Both streams joined in arrival order (seed 004). With `pty`, everything is here and in stdout. */
  output: string;
  /** The command that was executed, with its arguments. */
  command: string;
  /** How long the command ran, in milliseconds. */
  duration: number;
  /** ISO timestamp of when the command started. */
  timestamp: string;
  /** Session the command ran in. */
  sessionId?: string;
  /** Name of the signal that ended the command (`"SIGKILL"`), undefined when it exited. */
  signal?: string;
  /** Whether the command was killed because its `timeout` expired. */
  timedOut: boolean;
}

/** ExecEvent is one event of `execStream()`: `start`, then `stdout`/`stderr` text, then `complete` or `error`. */
export interface ExecEvent {
  /** What happened. */
  type: "start" | "stdout" | "stderr" | "complete" | "error";
  /** ISO timestamp of the event. */
  timestamp: string;
  /** The text, for stdout and stderr. */
  data?: string;
  /** The command, for start. */
  command?: string;
  /** The exit code, for complete. */
  exitCode?: number;
  /** The result, for complete. */
  result?: ExecResult;
  /** The failure, for error. */
  error?: Error;
}

/** Converts a finished command to an ExecResult. */
export function toExecResult(finished: CommandFinished, command: string, sessionId: string | undefined): ExecResult {
  return {
    success: finished.exitCode === 0,
    exitCode: finished.exitCode,
    stdout: finished.stdout(),
    stderr: finished.stderr(),
    output: finished.output(),
    command,
    duration: finished.exit.durationMs,
    timestamp: finished.exit.startTime.toISOString(),
    sessionId,
    signal: finished.signal,
    timedOut: finished.timedOut,
  };
}

/** A command ready to go through Exec: the request and how to describe it. */
export interface PreparedExec {
  /** The Exec request. */
  request: MessageInitShape<typeof ExecRequestSchema>;
  /** The command line, for ExecResult.command. */
  command: string;
  /** The session it runs in. */
  sessionId: string | undefined;
}

/**
 * Runs a command through Exec and waits for its exit (seed 000 and 004's `exec()`). It rejects with
 * a SandboxError when the daemon refuses the command or the stream ends without an exit (never an
 * invented exit code), and with `options.signal`'s reason when aborted (the command is killed).
 */
export async function runExec(context: CommandContext, prepared: PreparedExec, options: ExecOptions): Promise<ExecResult> {
  const controller = new AbortController();
  const unlink = linkAbort(options.signal, controller);
  try {
    const handle = await CommandHandle.exec(context, prepared.request, {
      signal: controller.signal,
      encoding: options.encoding,
      onOutput: options.onOutput,
    });
    const finished = await handle.result;
    const result = toExecResult(finished, prepared.command, prepared.sessionId);
    if (options.stream === true) options.onComplete?.(result);
    return result;
  } catch (error) {
    const failure: Error = options.signal?.aborted ? options.signal.reason : toSandboxError(error);
    options.onError?.(failure);
    throw failure;
  } finally {
    unlink();
    // After the exit this is a no-op; on any failure it cancels the call, which kills the command.
    controller.abort();
  }
}

/**
 * Runs a command through Exec as an async iterable of {@link ExecEvent}s (seed 000's
 * `execStream()`). Leaving the loop early cancels the call, which kills the command. Failures are
 * yielded as one `error` event that ends the stream.
 */
export async function* streamExec(context: CommandContext, prepared: PreparedExec, options: StreamOptions): AsyncGenerator<ExecEvent> {
  const controller = new AbortController();
  const unlink = linkAbort(options.signal, controller);
  const now = () => new Date().toISOString();
  try {
    let failure: Error | undefined;
    try {
      const handle = await CommandHandle.exec(context, prepared.request, { signal: controller.signal, encoding: options.encoding });
      yield { type: "start", timestamp: now(), command: prepared.command };
      const decoder = new StreamDecoder(options.encoding);
      for await (const chunk of handle) {
        const data = decoder.decode(chunk.stream, chunk.data);
        if (data !== "") yield { type: chunk.stream, timestamp: now(), data };
      }
      for (const stream of ["stdout", "stderr"] as const) {
        const data = decoder.flush(stream);
        if (data !== "") yield { type: stream, timestamp: now(), data };
      }
      const result = toExecResult(await handle.result, prepared.command, prepared.sessionId);
      yield { type: "complete", timestamp: now(), exitCode: result.exitCode, result };
    } catch (error) {
      failure = options.signal?.aborted ? options.signal.reason : toSandboxError(error);
    }
    if (failure !== undefined) yield { type: "error", timestamp: now(), error: failure };
  } finally {
    unlink();
    controller.abort();
  }
}

/** Aborts `controller` when `signal` aborts; returns the function that stops listening. */
export function linkAbort(signal: AbortSignal | undefined, controller: AbortController): () => void {
  if (signal === undefined) return () => {};
  if (signal.aborted) {
    controller.abort(signal.reason);
    return () => {};
  }
  const abort = () => controller.abort(signal.reason);
  signal.addEventListener("abort", abort, { once: true });
  return () => signal.removeEventListener("abort", abort);
}
