import { Code, ConnectError } from "@connectrpc/connect";
import { ProcessError, type ProcessErrorReason } from "../process/index.js";

const codeByReason: Record<ProcessErrorReason, Code> = {
  "invalid-argument": Code.InvalidArgument,
  "not-found": Code.NotFound,
  "already-exists": Code.AlreadyExists,
  "failed-precondition": Code.FailedPrecondition,
  "permission-denied": Code.PermissionDenied,
  "resource-exhausted": Code.ResourceExhausted,
  unavailable: Code.Unavailable,
  cancelled: Code.Canceled,
};

/**
 * Converts anything thrown by the process manager into a ConnectError with the exact code for its
 * reason, keeping the original as `cause`. ConnectErrors pass through unchanged; anything else
 * becomes Code.Internal with its message, so nothing reaches a client as a bare "internal error".
 */
export function toConnectError(error: unknown): ConnectError {
  if (error instanceof ConnectError) return error;
  if (error instanceof ProcessError) {
    return new ConnectError(error.message, codeByReason[error.reason], undefined, undefined, error);
  }
  const message = error instanceof Error ? error.message : String(error);
  return new ConnectError(`unexpected failure: ${message}`, Code.Internal, undefined, undefined, error);
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
