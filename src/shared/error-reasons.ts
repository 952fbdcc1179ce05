import type { ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, type ErrorInfo } from "../../gen/google/rpc/error_details_pb.js";
import type { ErrorReason } from "../../gen/sandbox/v1/sandbox_pb.js";

/**
 * The reasons a daemon failure can carry and how to read them, for the daemon and its clients alike:
 * every list of reasons in this project derives from sandbox.proto's generated `ErrorReason` enum
 * through {@link ErrorReasonName}, never from a copy kept by hand.
 *
 * @module
 */

/** The `domain` of every `google.rpc.ErrorInfo` the daemon sends. */
export const errorDomain = "sandbox.v1";

/**
 * A reason a failure can carry: the name of a sandbox.v1 `ErrorReason` value without its
 * `ERROR_REASON_` prefix (`PROCESS_NOT_FOUND`, `LIMIT_EXCEEDED`, ...).
 */
export type ErrorReasonName = Exclude<keyof typeof ErrorReason, "UNSPECIFIED">;

/** The `google.rpc.ErrorInfo` of an error of the daemon's domain, or undefined when it carries none. */
export function errorInfoOf(error: ConnectError): ErrorInfo | undefined {
  return error.findDetails(ErrorInfoSchema).find((info) => info.domain === errorDomain);
}
