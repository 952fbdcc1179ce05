import type { ErrorReasonName } from "../shared/error-reasons.js";

/**
 * Why a process-manager operation was refused: the names of sandbox.v1's `ErrorReason` values (without
 * their `ERROR_REASON_` prefix), all but those only the RPC layer gives (authentication, the Host
 * check, routing, protocol failures, deadlines and unexpected failures). The RPC layer sends the
 * reason as it is, in a `google.rpc.ErrorInfo`, and maps it to a status code in one table; this
 * module knows nothing of RPC.
 */
export type ProcessErrorReason = Exclude<
  ErrorReasonName,
  "UNAUTHENTICATED" | "HOST_NOT_ALLOWED" | "SERVICE_NOT_FOUND" | "INTERNAL" | "DEADLINE_EXCEEDED" | "PROTOCOL_ERROR"
>;

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
