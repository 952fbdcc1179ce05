import type http2 from "node:http2";

/** Default time between keepalive pings on an HTTP/2 connection, in milliseconds. */
export const defaultKeepaliveIntervalMs = 30_000;
/** Default time a ping may go unanswered before the connection is declared dead, in milliseconds. */
export const defaultKeepaliveTimeoutMs = 10_000;

/** Options for {@link watchSessionLiveness}. */
export interface KeepaliveOptions {
  /** Time between pings, in milliseconds. Default {@link defaultKeepaliveIntervalMs}. */
  intervalMs?: number;
  /** Time to wait for a ping's answer, in milliseconds. Default {@link defaultKeepaliveTimeoutMs}. */
  timeoutMs?: number;
}

/**
 * Pings an HTTP/2 session every `intervalMs` and destroys it when a ping is not answered within
 * `timeoutMs` (or fails). Destroying the session aborts every call on it, so a client that vanished
 * without closing (a cut cable, a blackholed route, a frozen VM) is noticed within
 * `intervalMs + timeoutMs` and its calls' resources are freed: an Exec's process is killed, a
 * followed background process keeps running. Stops by itself when the session closes.
 */
export function watchSessionLiveness(session: http2.ServerHttp2Session, options: KeepaliveOptions = {}): void {
  const intervalMs = options.intervalMs ?? defaultKeepaliveIntervalMs;
  const timeoutMs = options.timeoutMs ?? defaultKeepaliveTimeoutMs;
  let deadline: NodeJS.Timeout | undefined;
  const declareDead = () => {
    if (!session.destroyed) session.destroy(new Error("keepalive ping not answered: peer is gone"));
  };
  const interval = setInterval(() => {
    if (session.destroyed || session.closed || deadline !== undefined) return;
    deadline = setTimeout(declareDead, timeoutMs);
    deadline.unref();
    const sent = session.ping((error) => {
      clearTimeout(deadline);
      deadline = undefined;
      if (error) declareDead();
    });
    if (!sent) {
      clearTimeout(deadline);
      deadline = undefined;
    }
  }, intervalMs);
  interval.unref();
  session.once("close", () => {
    clearInterval(interval);
    clearTimeout(deadline);
  });
  // A destroyed session emits "error" with our reason; without a listener that would crash.
  session.on("error", () => {});
}
