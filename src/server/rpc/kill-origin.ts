import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { KillReason } from "../../process/index.js";
import { connectionKey } from "./call-context.js";
import { isShutdown } from "./errors.js";

/**
 * Why a call that ran a command is stopping it, for the exit's cause: the daemon's shutdown (the
 * call's signal carries SHUTTING_DOWN), the call's deadline, its connection lost (the HTTP/2 session
 * or the HTTP/1.1 socket is gone, which is how an HTTP/1.1 client cancels too), or a cancel.
 */
export function callEndReason(context: HandlerContext): KillReason {
  const signal = context.signal;
  if (isShutdown(signal)) return "daemon_shutdown";
  if (signal.aborted && signal.reason instanceof ConnectError && signal.reason.code === Code.DeadlineExceeded)
    return "deadline";
  const connection = context.values.get(connectionKey) as { destroyed?: boolean; closed?: boolean } | undefined;
  if (connection?.destroyed === true || connection?.closed === true) return "disconnect";
  return "cancel";
}
