/**
 * Why a process-manager operation was refused: the names of sandbox.v1's `ErrorReason` values (without
 * their `ERROR_REASON_` prefix) that the process manager can give. The RPC layer sends the reason as
 * it is, in a `google.rpc.ErrorInfo`, and maps it to a status code in one table; this module knows
 * nothing of RPC.
 */
export type ProcessErrorReason =
  | "PROCESS_NOT_FOUND"
  | "PROCESS_ALREADY_EXISTS"
  | "LIMIT_EXCEEDED"
  | "INVALID_ARGUMENT"
  | "CWD_OUTSIDE_WORKSPACE"
  | "CWD_NOT_FOUND"
  | "CWD_NOT_ACCESSIBLE"
  | "SUDO_NOT_ALLOWED"
  | "PROCESS_NOT_RUNNING"
  | "STDIN_NOT_OPEN"
  | "PTY_NOT_OPEN"
  | "OFFSET_OUT_OF_RANGE"
  | "SPAWN_FAILED"
  | "STATE_NOT_RECORDED"
  | "SHUTTING_DOWN"
  | "CANCELED";

/** Options for {@link ProcessError}. */
export interface ProcessErrorOptions {
  /** Facts a caller can act on, by name (`process_id`, `limit`, `field`...), as ErrorInfo metadata. */
  metadata?: Readonly<Record<string, string>>;
  /** The error that caused this one. */
  cause?: unknown;
}

/** ProcessError is a refused process-manager operation, with a reason and facts a caller can act on. */
export class ProcessError extends Error {
  /** Facts about the refusal, by name; empty when there are none. */
  readonly metadata: Readonly<Record<string, string>>;

  /** Creates an error; `message` is lowercase with no trailing period. */
  constructor(
    message: string,
    readonly reason: ProcessErrorReason,
    options: ProcessErrorOptions = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "ProcessError";
    this.metadata = options.metadata ?? {};
  }
}
