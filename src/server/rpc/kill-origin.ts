import { Socket } from "node:net";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { KillReason } from "../../process/index.js";
import { connectionKey } from "./call-context.js";
import { isShutdown } from "./errors.js";

/**
 * How close to its deadline a call may be cancelled and still count as ended by the deadline: a gRPC
 * client gives up at its deadline and resets the stream, which reaches the daemon as a cancel at about
 * the time the daemon's own timer for the same deadline fires (later or sooner by the headers' and the
 * reset's trips).
 */
export const deadlineSlackMs = 200;

/**
 * Why a call that ran a command is stopping it, for the exit's cause: the daemon's shutdown (the
 * call's signal carries SHUTTING_DOWN), the call's deadline (the daemon's timer, or the client giving
 * up within {@link deadlineSlackMs} of it: an HTTP/2 reset, an HTTP/1.1 socket closed), its connection
 * lost (the HTTP/2 session, or the HTTP/1.1 socket away from the deadline, which is how an HTTP/1.1
 * client cancels too), or a cancel.
 */
export function callEndReason(context: HandlerContext): KillReason {
  const signal = context.signal;
  if (isShutdown(signal)) return "daemon_shutdown";
  if (signal.aborted && signal.reason instanceof ConnectError && signal.reason.code === Code.DeadlineExceeded)
    return "deadline";
  const connection = context.values.get(connectionKey) as { destroyed?: boolean; closed?: boolean } | undefined;
  const lost = connection?.destroyed === true || connection?.closed === true;
  const remainingMs = context.timeoutMs();
  const atDeadline = remainingMs !== undefined && remainingMs <= deadlineSlackMs;
  // An HTTP/2 client at its deadline resets the stream, not the connection: a session lost then is a
  // disconnect. An HTTP/1.1 client can give up only by closing its socket, deadline or not.
  if (lost && !(atDeadline && connection instanceof Socket)) return "disconnect";
  return atDeadline ? "deadline" : "cancel";
}
