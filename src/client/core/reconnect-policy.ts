import { Code, ConnectError } from "@connectrpc/connect";
import { errorInfoOf } from "../../shared/error-reasons.js";

/** What a failed stream calls for: resume at once, resume after a backoff, or give up. */
export type FailureKind = "going-away" | "transient" | "fatal";

/**
 * ReconnectSettings are the reconnect policy's numbers. Each sandbox has its own (its `reconnect`
 * option over {@link defaultReconnectSettings}); a handle reads its sandbox's at each failure.
 */
export interface ReconnectSettings {
  /** Consecutive failed reconnect attempts before a handle gives up. Default 5. */
  readonly maxAttempts: number;
  /** Ceiling of the first backoff, in milliseconds; doubled on each consecutive failure. Default 500. */
  readonly backoffBaseMs: number;
  /** Largest backoff ceiling, in milliseconds. Default 10000. */
  readonly backoffMaxMs: number;
}

/** The reconnect settings of a sandbox that sets none. */
export const defaultReconnectSettings: ReconnectSettings = Object.freeze({
  maxAttempts: 5,
  backoffBaseMs: 500,
  backoffMaxMs: 10_000,
});

/**
 * The delay before reconnect attempt `attempt` (1 for the first), in milliseconds: a ceiling of
 * `backoffBaseMs · 2^(attempt - 1)` capped at `backoffMaxMs`, with "equal jitter": half the ceiling
 * plus a random part of the other half. The jitter spreads the clients a daemon restart cut off at
 * the same moment, so they do not all come back in lockstep; the fixed half keeps a floor under the
 * wait. `random` returns a number in [0, 1).
 */
export function backoffDelay(
  attempt: number,
  random: () => number = Math.random,
  settings: ReconnectSettings = defaultReconnectSettings,
): number {
  const ceiling = Math.min(settings.backoffMaxMs, settings.backoffBaseMs * 2 ** (attempt - 1));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/** Whether `error` is the daemon's answer that it is going away for a restart (SHUTTING_DOWN). */
export function isShuttingDownAnswer(error: unknown): boolean {
  return error instanceof ConnectError && errorInfoOf(error)?.reason === "SHUTTING_DOWN";
}

/**
 * Classifies a stream failure by codes only, never by message text:
 * - The daemon's own answer (it carries a `sandbox.v1` ErrorInfo): `going-away` for
 *   SHUTTING_DOWN (the daemon is going away for a restart, WebSocket's "1001 Going Away"),
 *   `transient` for any other UNAVAILABLE, `fatal` for everything else (NOT_FOUND, a refused
 *   argument...).
 * - Without one, the failure is the connection's: `transient` when a Node error code in its causes
 *   says so (ECONNRESET, EPIPE, ECONNREFUSED, ETIMEDOUT, an HTTP/2 session or stream error...), or
 *   for UNAVAILABLE, ABORTED and CANCELED (the caller rules out its own cancel), or for INTERNAL,
 *   INVALID_ARGUMENT and UNKNOWN raised by the client's transport itself, with no response metadata
 *   (a response cut short, an HTTP/2 reset); `fatal` otherwise.
 * A transient failure is `going-away` when `sawGoAway`: the server sent a graceful GOAWAY meanwhile.
 */
export function classifyFailure(error: unknown, sawGoAway: boolean): FailureKind {
  const connectError = ConnectError.from(error);
  const info = errorInfoOf(connectError);
  if (info !== undefined) {
    if (isShuttingDownAnswer(connectError)) return "going-away";
    return connectError.code === Code.Unavailable ? (sawGoAway ? "going-away" : "transient") : "fatal";
  }
  if (!isConnectionFailure(connectError)) return "fatal";
  return sawGoAway ? "going-away" : "transient";
}

/** Node error codes of a connection that broke, could not be made, or an HTTP/2 layer that failed. */
const connectionErrorCodes = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "EAI_AGAIN",
  "ERR_STREAM_PREMATURE_CLOSE",
]);

function isConnectionFailure(error: ConnectError): boolean {
  for (let cause: unknown = error.cause; cause instanceof Error; cause = cause.cause) {
    const code = "code" in cause ? cause.code : undefined;
    if (typeof code === "string" && (connectionErrorCodes.has(code) || code.startsWith("ERR_HTTP2_"))) return true;
  }
  switch (error.code) {
    case Code.Unavailable:
    case Code.Aborted:
    case Code.Canceled:
      return true;
    case Code.Internal:
    case Code.InvalidArgument:
    case Code.Unknown:
      return !hasResponseMetadata(error);
    default:
      return false;
  }
}

/** Whether a server's response (headers or trailers) came with the error: then a server sent it. */
function hasResponseMetadata(error: ConnectError): boolean {
  for (const _ of error.metadata.keys()) return true;
  return false;
}
