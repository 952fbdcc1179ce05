import { onAbort } from "../../shared/abort.js";
import { OutputLostError, StreamDecoder, type ProcessHandle } from "../core/index.js";
import type { ExecResult } from "./exec.js";
import { processStatuses, type ProcessStatus } from "../../shared/process-status.js";
import type { ExitCause } from "../../shared/exit-cause.js";

/**
 * Process is a background process as the Cloudflare Sandbox SDK's `Process` shows it. Every
 * {@link ProcessHandle} is one; the fields are as last seen by the handle, `getStatus()` refreshes them.
 */
export interface Process {
  /** Unique process identifier. */
  readonly id: string;
  /** System process id (if spawned). */
  readonly pid?: number | undefined;
  /** Command that was executed. */
  readonly command: string;
  /** Current process status, as last seen. */
  readonly status: ProcessStatus;
  /** When the process was started. */
  readonly startTime: Date;
  /** When the process ended (if completed). */
  readonly endTime?: Date | undefined;
  /** Exit code (if completed); 128 + signal number when a signal ended it. */
  readonly exitCode?: number | undefined;
  /** Why it ended (if it has), as in ProcessExit.cause: `exited`, `signaled`, `killed_on_request`, `out_of_memory`... */
  readonly cause?: ExitCause | undefined;
  /** Session id, if any. */
  readonly sessionId?: string | undefined;
  /** Signals the process group (SIGTERM by default). */
  kill(signal?: string): Promise<void>;
  /** Refreshes and returns the status. */
  getStatus(): Promise<ProcessStatus>;
  /** The output the daemon retains, as text. */
  getLogs(): Promise<{ stdout: string; stderr: string }>;
}

/** LogEvent is one event of `streamProcessLogs()`, as the Cloudflare Sandbox SDK's `LogEvent`. */
export interface LogEvent {
  /**
   * `stdout`/`stderr`: text; `status`: the status when the stream began and the final one at the
   * exit (as `data`); `error`: output was lost (its message as `data`), the stream goes on after it.
   */
  type: "stdout" | "stderr" | "status" | "error";
  /** ISO timestamp of the event. */
  timestamp: string;
  /** Text, status name or error message. */
  data: string;
  /** The process. */
  processId: string;
  /** Its session, if any. */
  sessionId?: string;
}

/**
 * Follows a process's output as LogEvents until it exits, reconnecting as its handle does. A
 * gap (output the daemon dropped before it was read) is an `error` event, after which the stream
 * continues with the bytes after the gap. Ends (without an error) when `signal` aborts; a lasting
 * failure is thrown as a SandboxError.
 */
export async function* logEvents(
  first: ProcessHandle,
  encoding: string | undefined,
  signal?: AbortSignal,
): AsyncGenerator<LogEvent> {
  const event = (type: LogEvent["type"], data: string): LogEvent => ({
    type,
    timestamp: new Date().toISOString(),
    data,
    processId: first.id,
    sessionId: first.sessionId,
  });
  const decoder = new StreamDecoder(encoding);
  let handle = first;
  if (signal?.aborted) return;
  const listening = onAbort(signal, () => handle.detach());
  try {
    yield event("status", handle.status);
    for (;;) {
      try {
        for await (const chunk of handle) {
          const data = decoder.decode(chunk.stream, chunk.data);
          if (data !== "") yield event(chunk.stream, data);
        }
        break;
      } catch (error) {
        if (signal?.aborted) return;
        if (!(error instanceof OutputLostError)) throw error;
        yield event("error", error.message);
        handle = await handle.reconnect();
      }
    }
    for (const stream of ["stdout", "stderr"] as const) {
      const data = decoder.flush(stream);
      if (data !== "") yield event(stream, data);
    }
    await handle.result;
    yield event("status", handle.status);
  } finally {
    listening.dispose();
    handle.detach();
  }
}

/** Whether `value` looks like an {@link ExecResult} (as the Cloudflare Sandbox SDK's type guard). */
export function isExecResult(value: unknown): value is ExecResult {
  const candidate = value as Partial<ExecResult> | null | undefined;
  return (
    typeof candidate === "object" &&
    candidate !== null &&
    typeof candidate.success === "boolean" &&
    typeof candidate.exitCode === "number" &&
    typeof candidate.stdout === "string" &&
    typeof candidate.stderr === "string"
  );
}

/** Whether `value` looks like a {@link Process} (as the Cloudflare Sandbox SDK's type guard). */
export function isProcess(value: unknown): value is Process {
  const candidate = value as Partial<Process> | null | undefined;
  return (
    typeof candidate === "object" &&
    candidate !== null &&
    typeof candidate.id === "string" &&
    typeof candidate.command === "string" &&
    typeof candidate.status === "string"
  );
}

/** Whether `value` is a {@link ProcessStatus} name (as the Cloudflare Sandbox SDK's type guard). */
export function isProcessStatus(value: unknown): value is ProcessStatus {
  return typeof value === "string" && (processStatuses as readonly string[]).includes(value);
}
