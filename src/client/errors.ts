import { Code, ConnectError } from "@connectrpc/connect";

/**
 * SandboxError is the error every client call fails with: an RPC refused by the daemon, a connection
 * that could not be re-established, an invalid lifecycle transition or a stream that ended without
 * an exit.
 *
 * `code` is a stable, upper-case name: for RPC failures the gRPC code's name (`NOT_FOUND`,
 * `PERMISSION_DENIED`, `UNAVAILABLE`, ...), otherwise one of the names documented where the error is
 * thrown (`INVALID_TRANSITION`, `NO_EXIT`, `OUTPUT_LOST`, ...). The original `ConnectError`, when
 * there is one, is the `cause`.
 */
export class SandboxError extends Error {
  /** Stable upper-case name of the failure, such as `NOT_FOUND` or `INVALID_TRANSITION`. */
  readonly code: string;

  constructor(message: string, code = "UNKNOWN", options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SandboxError";
    this.code = code;
  }

  /** The ConnectError this error was mapped from, if any. */
  get connectError(): ConnectError | undefined {
    return this.cause instanceof ConnectError ? this.cause : undefined;
  }
}

/** ProcessNotFoundError says the daemon knows no process of that id (gRPC NOT_FOUND). */
export class ProcessNotFoundError extends SandboxError {
  /** The id asked for. */
  readonly processId: string;

  constructor(processId: string, options?: { cause?: unknown }) {
    super(`Process not found: ${processId}`, "PROCESS_NOT_FOUND", options);
    this.name = "ProcessNotFoundError";
    this.processId = processId;
  }
}

/** ProcessAlreadyExistsError says a live process already has that client-chosen id (gRPC ALREADY_EXISTS). */
export class ProcessAlreadyExistsError extends SandboxError {
  /** The id asked for. */
  readonly processId: string;

  constructor(processId: string, options?: { cause?: unknown }) {
    super(`Process already exists: ${processId}`, "PROCESS_EXISTS", options);
    this.name = "ProcessAlreadyExistsError";
    this.processId = processId;
  }
}

/**
 * ExecutionTimeoutError says a call's own deadline passed (gRPC DEADLINE_EXCEEDED) or a bounded wait
 * such as `CommandHandle.wait({ timeout })` gave up. A command killed by its `timeout` option is not
 * an error: it resolves with `timedOut: true` and a non-zero exit code.
 */
export class ExecutionTimeoutError extends SandboxError {
  /** The time limit that passed, in milliseconds (0 when unknown). */
  readonly timeout: number;

  constructor(timeout: number, options?: { cause?: unknown }) {
    super(`Execution timed out after ${timeout}ms`, "EXECUTION_TIMEOUT", options);
    this.name = "ExecutionTimeoutError";
    this.timeout = timeout;
  }
}

/**
 * OutputLostError says output of a background process was dropped by the daemon before this client
 * read it (the daemon retains a bounded amount per process; a reader that is too slow or away too
 * long sees a gap). The handle's offsets have been moved past the gap, so `handle.reconnect()`
 * continues with the bytes after it when losing them is acceptable.
 */
export class OutputLostError extends SandboxError {
  /** The stream that lost bytes. */
  readonly stream: "stdout" | "stderr";
  /** Offset of the first lost byte. */
  readonly offset: number;
  /** How many bytes were lost. */
  readonly missedBytes: number;

  constructor(stream: "stdout" | "stderr", offset: number, missedBytes: number) {
    super(`${missedBytes} bytes of ${stream} from offset ${offset} were dropped by the daemon before they were read`, "OUTPUT_LOST");
    this.name = "OutputLostError";
    this.stream = stream;
    this.offset = offset;
    this.missedBytes = missedBytes;
  }
}

/** What the failing call was about, to name it in the error. */
export interface ErrorContext {
  /** The process the call was about, for NOT_FOUND and ALREADY_EXISTS. */
  processId?: string;
  /** The call's time limit in milliseconds, for DEADLINE_EXCEEDED. */
  timeout?: number;
}

/**
 * Converts anything a call threw into a SandboxError: NOT_FOUND about a process becomes
 * {@link ProcessNotFoundError}, ALREADY_EXISTS {@link ProcessAlreadyExistsError}, DEADLINE_EXCEEDED
 * {@link ExecutionTimeoutError}, any other ConnectError a SandboxError named after its code with
 * the daemon's message. SandboxErrors pass through unchanged; the original error is the `cause`.
 */
export function toSandboxError(error: unknown, context: ErrorContext = {}): SandboxError {
  if (error instanceof SandboxError) return error;
  const connectError = ConnectError.from(error);
  const options = { cause: connectError };
  switch (connectError.code) {
    case Code.NotFound:
      if (context.processId !== undefined) return new ProcessNotFoundError(context.processId, options);
      break;
    case Code.AlreadyExists:
      if (context.processId !== undefined) return new ProcessAlreadyExistsError(context.processId, options);
      break;
    case Code.DeadlineExceeded:
      return new ExecutionTimeoutError(context.timeout ?? 0, options);
  }
  const code = isUnreachable(connectError) ? "UNAVAILABLE" : codeName(connectError.code);
  return new SandboxError(connectError.rawMessage || connectError.message, code, options);
}

/**
 * Whether a call failed because the daemon could not be reached at all: UNAVAILABLE, or any failure
 * while connecting (a reset or refused connection, an unknown host), which connect-node reports
 * under various codes.
 */
export function isUnreachable(error: ConnectError): boolean {
  if (error.code === Code.Unavailable) return true;
  for (let cause: unknown = error.cause; cause instanceof Error; cause = cause.cause) {
    if ("syscall" in cause && (cause.syscall === "connect" || cause.syscall === "getaddrinfo")) return true;
  }
  return false;
}

/** The gRPC name of a code, such as `PERMISSION_DENIED` for Code.PermissionDenied. */
export function codeName(code: Code): string {
  return (Code[code] ?? "UNKNOWN").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}
