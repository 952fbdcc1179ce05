import { Code, ConnectError } from "@connectrpc/connect";
import { ProcessExitedSchema } from "../../../gen/sandbox/v1/sandbox_pb.js";
import { errorInfoOf, type ErrorReasonName } from "../../shared/error-reasons.js";
import { exitFromProto, type ProcessExit } from "./process-record.js";

/**
 * SandboxErrorReason names why the daemon refused a call: the `reason` of the `google.rpc.ErrorInfo`
 * detail every daemon failure carries (sandbox.proto's `ErrorReason` values without their prefix).
 * A daemon newer than this client may send reasons its generated enum lacks; they arrive unchanged.
 */
export type SandboxErrorReason = ErrorReasonName | (string & {});

/** What a {@link SandboxError} is made of besides its message and code. */
export interface SandboxErrorOptions {
  /** The error this one stands for, usually the call's `ConnectError`. */
  cause?: unknown;
  /** The daemon's reason, from the error's `google.rpc.ErrorInfo` detail. */
  reason?: SandboxErrorReason;
  /** The detail's metadata: facts about the failure such as `process_id` or `limit`. */
  metadata?: Readonly<Record<string, string>>;
}

/**
 * SandboxError is the error every client call fails with: an RPC refused by the daemon, a connection
 * that could not be re-established, an invalid lifecycle transition or a stream that ended without
 * an exit.
 *
 * `code` is a stable, upper-case name: for RPC failures the gRPC code's name (`NOT_FOUND`,
 * `PERMISSION_DENIED`, `UNAVAILABLE`, ...), otherwise one of the names documented where the error is
 * thrown (`INVALID_TRANSITION`, `NO_EXIT`, `OUTPUT_LOST`, ...). When the daemon refused the call,
 * `reason` and `metadata` are its `google.rpc.ErrorInfo` detail (`CWD_OUTSIDE_WORKSPACE` with the
 * `cwd`, ...): branch on them, never on the message. The original `ConnectError` is the `cause`.
 */
export class SandboxError extends Error {
  /** Stable upper-case name of the failure, such as `NOT_FOUND` or `INVALID_TRANSITION`. */
  readonly code: string;
  /** Why the daemon refused the call, when it did (see {@link SandboxErrorReason}). */
  readonly reason?: SandboxErrorReason;
  /** The metadata of the daemon's reason; empty when there is none. */
  readonly metadata: Readonly<Record<string, string>>;

  /** Creates an error; `code` is `UNKNOWN` unless given. */
  constructor(message: string, code = "UNKNOWN", options: SandboxErrorOptions = {}) {
    super(message, { cause: options.cause });
    this.name = "SandboxError";
    this.code = code;
    this.reason = options.reason;
    this.metadata = options.metadata ?? {};
  }

  /** The ConnectError this error was mapped from, if any. */
  get connectError(): ConnectError | undefined {
    return this.cause instanceof ConnectError ? this.cause : undefined;
  }
}

/** ProcessNotFoundError says the daemon has no record of the process (reason PROCESS_NOT_FOUND). */
export class ProcessNotFoundError extends SandboxError {
  /** The id asked for. */
  readonly processId: string;

  /** Creates the error for `processId`; code `PROCESS_NOT_FOUND`. */
  constructor(processId: string, options: SandboxErrorOptions = {}) {
    super(`Process not found: ${processId}`, "PROCESS_NOT_FOUND", { reason: "PROCESS_NOT_FOUND", ...options });
    this.name = "ProcessNotFoundError";
    this.processId = processId;
  }
}

/** ProcessAlreadyExistsError says a live process already has the requested id (reason PROCESS_ALREADY_EXISTS). */
export class ProcessAlreadyExistsError extends SandboxError {
  /** The id asked for. */
  readonly processId: string;

  /** Creates the error for `processId`; code `PROCESS_EXISTS`, as the Cloudflare Sandbox SDK names it. */
  constructor(processId: string, options: SandboxErrorOptions = {}) {
    super(`Process already exists: ${processId}`, "PROCESS_EXISTS", { reason: "PROCESS_ALREADY_EXISTS", ...options });
    this.name = "ProcessAlreadyExistsError";
    this.processId = processId;
  }
}

/**
 * LimitExceededError says a limit of the daemon is reached (reason LIMIT_EXCEEDED, code
 * RESOURCE_EXHAUSTED): too many processes or calls, a message or input larger than allowed.
 */
export class LimitExceededError extends SandboxError {
  /** The limit: the daemon flag that sets it (`max-processes`, `max-calls`, ...) or its fixed name. */
  readonly limit: string;
  /** The limit's value, as the daemon gave it; undefined when it gave none. */
  readonly value?: number;

  /** Creates the error with the daemon's message; code `RESOURCE_EXHAUSTED`. */
  constructor(message: string, limit: string, value: number | undefined, options: SandboxErrorOptions = {}) {
    super(message, "RESOURCE_EXHAUSTED", { reason: "LIMIT_EXCEEDED", ...options });
    this.name = "LimitExceededError";
    this.limit = limit;
    this.value = value;
  }
}

/**
 * ProcessNotRunningError says the process has exited, so input, resizes and signals are refused
 * (reason PROCESS_NOT_RUNNING, code FAILED_PRECONDITION).
 */
export class ProcessNotRunningError extends SandboxError {
  /** The process. */
  readonly processId: string;

  /** Creates the error with the daemon's message; code `FAILED_PRECONDITION`. */
  constructor(message: string, processId: string, options: SandboxErrorOptions = {}) {
    super(message, "FAILED_PRECONDITION", { reason: "PROCESS_NOT_RUNNING", ...options });
    this.name = "ProcessNotRunningError";
    this.processId = processId;
  }
}

/**
 * StdinNotOpenError says the process has no stdin to write to: it was started without `stdin`
 * (or input, or a PTY), or its stdin was closed (reason STDIN_NOT_OPEN, code FAILED_PRECONDITION).
 */
export class StdinNotOpenError extends SandboxError {
  /** The process. */
  readonly processId: string;

  /** Creates the error with the daemon's message; code `FAILED_PRECONDITION`. */
  constructor(message: string, processId: string, options: SandboxErrorOptions = {}) {
    super(message, "FAILED_PRECONDITION", { reason: "STDIN_NOT_OPEN", ...options });
    this.name = "StdinNotOpenError";
    this.processId = processId;
  }
}

/**
 * FileNotFoundError says a path of a file call (or one of its parents) does not exist (reason
 * PATH_NOT_FOUND, code NOT_FOUND), as Cloudflare's Sandbox SDK names it.
 */
export class FileNotFoundError extends SandboxError {
  /** The path, as requested. */
  readonly path: string;

  /** Creates the error with the daemon's message; code `NOT_FOUND`. */
  constructor(message: string, path: string, options: SandboxErrorOptions = {}) {
    super(message, "NOT_FOUND", { reason: "PATH_NOT_FOUND", ...options });
    this.name = "FileNotFoundError";
    this.path = path;
  }
}

/**
 * FileExistsError says something exists at a path a file call must create: a write with
 * `overwrite: false`, a mkdir without `recursive`, a rename without `overwrite` (reason
 * PATH_ALREADY_EXISTS, code ALREADY_EXISTS), as Cloudflare's Sandbox SDK names it.
 */
export class FileExistsError extends SandboxError {
  /** The path, as requested. */
  readonly path: string;

  /** Creates the error with the daemon's message; code `ALREADY_EXISTS`. */
  constructor(message: string, path: string, options: SandboxErrorOptions = {}) {
    super(message, "ALREADY_EXISTS", { reason: "PATH_ALREADY_EXISTS", ...options });
    this.name = "FileExistsError";
    this.path = path;
  }
}

/**
 * ExecutionTimeoutError says a command ran out of time: exec() and execStream() of a command killed
 * by its `timeout` (as the Cloudflare Sandbox SDK's exec reports it), a call whose own deadline
 * passed (gRPC DEADLINE_EXCEEDED), or a bounded wait such as `wait({ timeoutMs })`.
 */
export class ExecutionTimeoutError extends SandboxError {
  /** The time limit that passed, in milliseconds (0 when unknown). */
  readonly timeout: number;

  /**
   * Creates the error for a limit of `timeout` milliseconds; code `EXECUTION_TIMEOUT`. `message`
   * says which limit it was and where it came from (see the exec calls); a generic one otherwise.
   */
  constructor(timeout: number, options: SandboxErrorOptions & { message?: string } = {}) {
    super(options.message ?? `Execution timed out after ${timeout}ms`, "EXECUTION_TIMEOUT", options);
    this.name = "ExecutionTimeoutError";
    this.timeout = timeout;
  }
}

/**
 * ProcessReadyTimeoutError says a readiness wait (`waitForPort`, `waitForLog`, `waitForExit`) reached
 * its `timeout` first (reason WAIT_TIMED_OUT), as the Cloudflare Sandbox SDK names it; the process
 * runs on. It carries what the daemon reports: the process's last output lines and, for a port,
 * what the last try found.
 */
export class ProcessReadyTimeoutError extends SandboxError {
  /** The process the wait was tied to; empty for a port wait of none. */
  readonly processId: string;
  /** The time limit, in milliseconds. */
  readonly timeout: number;
  /** What was waited for (`"port 3000"`, `"log /ready/"`, `"exit"`). */
  readonly condition: string;
  /** The last lines of the process's stdout (at most 1 KiB); empty when none. */
  readonly lastStdout: string;
  /** The last lines of its stderr (at most 1 KiB); empty when none. */
  readonly lastStderr: string;
  /** For a port, what the last try found at each address (`"127.0.0.1:3000: connection refused"`). */
  readonly lastProbe: string;

  /** Creates the error from the daemon's message and metadata; code `PROCESS_READY_TIMEOUT`. */
  constructor(message: string, metadata: Readonly<Record<string, string>>, options: SandboxErrorOptions = {}) {
    super(message, "PROCESS_READY_TIMEOUT", { reason: "WAIT_TIMED_OUT", metadata, ...options });
    this.name = "ProcessReadyTimeoutError";
    this.processId = metadata.process_id ?? "";
    this.timeout = Number(metadata.timeout_ms ?? 0);
    this.condition = metadata.waiting_for ?? "";
    this.lastStdout = metadata.last_stdout ?? "";
    this.lastStderr = metadata.last_stderr ?? "";
    this.lastProbe = metadata.last_probe ?? "";
  }
}

/**
 * ProcessExitedBeforeReadyError says the process a readiness wait was tied to exited (or never
 * started) before the condition was met (reason PROCESS_EXITED, code FAILED_PRECONDITION), as the
 * Cloudflare Sandbox SDK names it; the wait failed as soon as the exit was known. It carries the
 * exit record and the process's last output lines.
 */
export class ProcessExitedBeforeReadyError extends SandboxError {
  /** The process. */
  readonly processId: string;
  /** What was waited for (`"port 3000"`, `"log /ready/"`). */
  readonly condition: string;
  /** How the process ended, as the daemon recorded it; undefined if the daemon sent no record. */
  readonly exit?: ProcessExit;
  /** The exit code (128 + the signal's number after a signal), as in {@link ProcessExit.exitCode}. */
  readonly exitCode?: number;
  /** The last lines of the process's stdout (at most 1 KiB); empty when none. */
  readonly lastStdout: string;
  /** The last lines of its stderr (at most 1 KiB); empty when none. */
  readonly lastStderr: string;

  /** Creates the error from the daemon's message, metadata and exit record; code `PROCESS_EXITED_BEFORE_READY`. */
  constructor(
    message: string,
    metadata: Readonly<Record<string, string>>,
    exit: ProcessExit | undefined,
    options: SandboxErrorOptions = {},
  ) {
    super(message, "PROCESS_EXITED_BEFORE_READY", { reason: "PROCESS_EXITED", metadata, ...options });
    this.name = "ProcessExitedBeforeReadyError";
    this.processId = metadata.process_id ?? "";
    this.condition = metadata.waiting_for ?? "";
    this.exit = exit;
    this.exitCode = exit?.exitCode ?? (metadata.exit_code === undefined ? undefined : Number(metadata.exit_code));
    this.lastStdout = metadata.last_stdout ?? "";
    this.lastStderr = metadata.last_stderr ?? "";
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

  /** Creates the error for `missedBytes` bytes of `stream` from `offset`; code `OUTPUT_LOST`. */
  constructor(stream: "stdout" | "stderr", offset: number, missedBytes: number) {
    super(
      `${missedBytes} bytes of ${stream} from offset ${offset} were dropped by the daemon before they were read`,
      "OUTPUT_LOST",
    );
    this.name = "OutputLostError";
    this.stream = stream;
    this.offset = offset;
    this.missedBytes = missedBytes;
  }
}

/**
 * Converts anything a call threw into a SandboxError, by the daemon's reason where it gave one:
 * PROCESS_NOT_FOUND becomes {@link ProcessNotFoundError}, PROCESS_ALREADY_EXISTS
 * {@link ProcessAlreadyExistsError}, LIMIT_EXCEEDED {@link LimitExceededError}, PROCESS_NOT_RUNNING
 * {@link ProcessNotRunningError}, STDIN_NOT_OPEN {@link StdinNotOpenError}, PATH_NOT_FOUND
 * {@link FileNotFoundError}, PATH_ALREADY_EXISTS {@link FileExistsError}, WAIT_TIMED_OUT
 * {@link ProcessReadyTimeoutError}, PROCESS_EXITED {@link ProcessExitedBeforeReadyError}, a passed deadline
 * {@link ExecutionTimeoutError} (with `timeoutMs` when the caller knows it), and anything else a
 * SandboxError named after its code with the reason and metadata as they came. The message is
 * the daemon's and is never read. SandboxErrors pass through unchanged; the original is the `cause`.
 */
export function toSandboxError(error: unknown, context: { timeoutMs?: number } = {}): SandboxError {
  if (error instanceof SandboxError) return error;
  const connectError = ConnectError.from(error);
  const info = errorInfoOf(connectError);
  const message = connectError.rawMessage || connectError.message;
  const options: SandboxErrorOptions = { cause: connectError, reason: info?.reason, metadata: info?.metadata };
  const metadata = info?.metadata ?? {};
  switch (info?.reason) {
    case "PROCESS_NOT_FOUND":
      return new ProcessNotFoundError(metadata.process_id ?? "", options);
    case "PROCESS_ALREADY_EXISTS":
      return new ProcessAlreadyExistsError(metadata.process_id ?? "", options);
    case "LIMIT_EXCEEDED":
      return new LimitExceededError(
        message,
        metadata.limit ?? "",
        metadata.value === undefined ? undefined : Number(metadata.value),
        options,
      );
    case "PROCESS_NOT_RUNNING":
      return new ProcessNotRunningError(message, metadata.process_id ?? "", options);
    case "STDIN_NOT_OPEN":
      return new StdinNotOpenError(message, metadata.process_id ?? "", options);
    case "PATH_NOT_FOUND":
      return new FileNotFoundError(message, metadata.path ?? "", options);
    case "PATH_ALREADY_EXISTS":
      return new FileExistsError(message, metadata.path ?? "", options);
    case "WAIT_TIMED_OUT":
      return new ProcessReadyTimeoutError(message, metadata, options);
    case "PROCESS_EXITED": {
      const [exited] = connectError.findDetails(ProcessExitedSchema);
      return new ProcessExitedBeforeReadyError(message, metadata, exited && exitFromProto(exited), options);
    }
  }
  if (connectError.code === Code.DeadlineExceeded) return new ExecutionTimeoutError(context.timeoutMs ?? 0, options);
  return new SandboxError(message, isUnreachable(connectError) ? "UNAVAILABLE" : codeName(connectError.code), options);
}

/**
 * Whether a call failed because the daemon could not be reached at all: UNAVAILABLE, or any failure
 * while connecting (a refused connection, an unknown host: a `connect` or `getaddrinfo` system call
 * in the error's causes), which connect-node reports under various codes.
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
