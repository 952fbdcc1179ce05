/**
 * Why a process-manager operation was refused. The RPC layer maps each reason to a status code;
 * this module knows nothing of RPC.
 */
export type ProcessErrorReason =
  | "invalid-argument"
  | "not-found"
  | "already-exists"
  | "failed-precondition"
  | "permission-denied"
  | "resource-exhausted"
  | "unavailable"
  | "cancelled";

/** ProcessError is a refused process-manager operation, with a reason a caller can act on. */
export class ProcessError extends Error {
  /** Creates an error; `message` is lowercase with no trailing period. */
  constructor(
    message: string,
    readonly reason: ProcessErrorReason,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "ProcessError";
  }
}
