import { create } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, encodeBinaryHeader } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../../gen/google/rpc/status_pb.js";
import { FileError } from "../../files/index.js";
import { ProcessError } from "../../process/index.js";
import { errorDomain, errorInfoOf, type ErrorReasonName } from "../../shared/error-reasons.js";

export { errorDomain, errorInfoOf, type ErrorReasonName };

/**
 * The status code of each reason: the one table that maps them. A reason the proto gains and this
 * table lacks fails the type check, and so does a ProcessError reason the proto lacks.
 */
const codeByReason = {
  PROCESS_NOT_FOUND: Code.NotFound,
  PROCESS_ALREADY_EXISTS: Code.AlreadyExists,
  LIMIT_EXCEEDED: Code.ResourceExhausted,
  INVALID_ARGUMENT: Code.InvalidArgument,
  CWD_OUTSIDE_WORKSPACE: Code.PermissionDenied,
  SUDO_NOT_ALLOWED: Code.PermissionDenied,
  PROCESS_NOT_RUNNING: Code.FailedPrecondition,
  STDIN_NOT_OPEN: Code.FailedPrecondition,
  UNAUTHENTICATED: Code.Unauthenticated,
  SHUTTING_DOWN: Code.Unavailable,
  SPAWN_FAILED: Code.FailedPrecondition,
  CWD_NOT_FOUND: Code.FailedPrecondition,
  CWD_NOT_ACCESSIBLE: Code.PermissionDenied,
  PTY_NOT_OPEN: Code.FailedPrecondition,
  OFFSET_OUT_OF_RANGE: Code.OutOfRange,
  HOST_NOT_ALLOWED: Code.PermissionDenied,
  STATE_NOT_RECORDED: Code.ResourceExhausted,
  CANCELED: Code.Canceled,
  SERVICE_NOT_FOUND: Code.NotFound,
  INTERNAL: Code.Internal,
  DEADLINE_EXCEEDED: Code.DeadlineExceeded,
  PROTOCOL_ERROR: Code.Unimplemented,
  PATH_NOT_FOUND: Code.NotFound,
  PATH_ALREADY_EXISTS: Code.AlreadyExists,
  PATH_OUTSIDE_WORKSPACE: Code.PermissionDenied,
  PATH_NOT_ACCESSIBLE: Code.PermissionDenied,
  IS_A_DIRECTORY: Code.FailedPrecondition,
  NOT_A_DIRECTORY: Code.FailedPrecondition,
  DIRECTORY_NOT_EMPTY: Code.FailedPrecondition,
  NOT_A_REGULAR_FILE: Code.FailedPrecondition,
  STORAGE_EXHAUSTED: Code.ResourceExhausted,
  CONTENT_MISMATCH: Code.DataLoss,
  CROSS_DEVICE: Code.FailedPrecondition,
  WORKSPACE_ROOT: Code.FailedPrecondition,
  READ_ONLY_FILESYSTEM: Code.FailedPrecondition,
  SYMLINK_LOOP: Code.FailedPrecondition,
  FILE_BUSY: Code.FailedPrecondition,
  FILE_SERVICE_UNAVAILABLE: Code.FailedPrecondition,
  WAIT_TIMED_OUT: Code.DeadlineExceeded,
  PROCESS_EXITED: Code.FailedPrecondition,
  PATTERN_INVALID: Code.InvalidArgument,
  PORTS_UNAVAILABLE: Code.FailedPrecondition,
  RETENTION_ABOVE_LIMIT: Code.InvalidArgument,
  LIMIT_ABOVE_CAP: Code.InvalidArgument,
  LIMIT_NOT_ENFORCEABLE: Code.FailedPrecondition,
} as const satisfies Record<ErrorReasonName, Code>;

/** The status code a reason is sent with. */
export function codeOfReason(reason: ErrorReasonName): Code {
  return codeByReason[reason];
}

/**
 * The reason given to a failure that was made without one (by the protocol layer, before the
 * service): the reason whose own code it is where there is one, else PROTOCOL_ERROR.
 */
export function reasonForCode(code: Code): ErrorReasonName {
  switch (code) {
    case Code.InvalidArgument:
      return "INVALID_ARGUMENT";
    case Code.ResourceExhausted:
      return "LIMIT_EXCEEDED";
    case Code.Unauthenticated:
      return "UNAUTHENTICATED";
    case Code.Canceled:
      return "CANCELED";
    case Code.Internal:
      return "INTERNAL";
    case Code.DeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    default:
      return "PROTOCOL_ERROR";
  }
}

/** Options for {@link sandboxError}. */
export interface SandboxErrorOptions {
  /** ErrorInfo metadata: facts a client can act on (`process_id`, `limit`, `field`...). */
  metadata?: Readonly<Record<string, string>>;
  /** The error that caused this one. */
  cause?: unknown;
}

/**
 * Creates the ConnectError of a refusal: the reason's status code, `message` (lowercase, no trailing
 * period), and a `google.rpc.ErrorInfo` detail with domain {@link errorDomain}, the reason and the
 * metadata, which every protocol carries to the client.
 */
export function sandboxError(
  reason: ErrorReasonName,
  message: string,
  options: SandboxErrorOptions = {},
): ConnectError {
  const error = new ConnectError(message, codeByReason[reason], undefined, undefined, options.cause);
  error.details.push({
    desc: ErrorInfoSchema,
    value: { reason, domain: errorDomain, metadata: { ...options.metadata } },
  });
  return error;
}

/**
 * Gives an error that carries no ErrorInfo one, with the reason of its code ({@link reasonForCode});
 * an error that has one is returned as it is.
 */
export function withErrorInfo(error: ConnectError): ConnectError {
  if (errorInfoOf(error) !== undefined) return error;
  error.details.push({ desc: ErrorInfoSchema, value: { reason: reasonForCode(error.code), domain: errorDomain } });
  return error;
}

/**
 * The value of a `grpc-status-details-bin` header for `error`: a `google.rpc.Status` with its code,
 * message and details, as connect-es writes it for the answers it makes itself.
 */
export function grpcStatusDetails(error: ConnectError): string {
  const status = create(StatusSchema, {
    code: error.code,
    message: error.rawMessage,
    details: error.details.map((detail) =>
      "desc" in detail
        ? anyPack(detail.desc, create(detail.desc, detail.value))
        : { typeUrl: `type.googleapis.com/${detail.type}`, value: detail.value },
    ),
  });
  return encodeBinaryHeader(status, StatusSchema);
}

/** The error a call ends with when the daemon shuts down under it (SHUTTING_DOWN, UNAVAILABLE). */
export function shuttingDownError(): ConnectError {
  return sandboxError("SHUTTING_DOWN", "the daemon is shutting down");
}

/**
 * Whether a call's signal fired because the daemon is shutting down: its reason is the
 * SHUTTING_DOWN error the daemon aborts its shutdown signal with (see `startServer`).
 */
export function isShutdown(signal: AbortSignal): boolean {
  return (
    signal.aborted && signal.reason instanceof ConnectError && errorInfoOf(signal.reason)?.reason === "SHUTTING_DOWN"
  );
}

/**
 * Throws the call's abort reason when the daemon shutting down aborted it: a stream then ends with
 * UNAVAILABLE (SHUTTING_DOWN) rather than as if it had completed.
 */
export function throwIfShuttingDown(signal: AbortSignal): void {
  if (isShutdown(signal)) throw signal.reason;
}

/**
 * Converts anything thrown by the process manager into a ConnectError with the exact code and an
 * ErrorInfo for its reason, keeping the original as `cause`. ConnectErrors pass through unchanged;
 * anything else becomes INTERNAL with its message, so nothing reaches a client as a bare "internal
 * error".
 */
export function toConnectError(error: unknown): ConnectError {
  if (error instanceof ConnectError) return error;
  if (error instanceof ProcessError || error instanceof FileError)
    return sandboxError(error.reason, error.message, { metadata: error.metadata, cause: error });
  const message = error instanceof Error ? error.message : String(error);
  return sandboxError("INTERNAL", `unexpected failure: ${message}`, { cause: error });
}

/**
 * Runs `operation`, rethrowing any failure as a ConnectError (see {@link toConnectError}): thrown
 * synchronously, or as the rejection of the promise `operation` returns.
 */
export function withConnectErrors<T>(operation: () => T): T {
  let result: T;
  try {
    result = operation();
  } catch (error) {
    throw toConnectError(error);
  }
  if (result instanceof Promise) {
    return result.catch((error: unknown) => {
      throw toConnectError(error);
    }) as T;
  }
  return result;
}
