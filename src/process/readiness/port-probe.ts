import http from "node:http";
import net from "node:net";
import { onAbort } from "../../shared/abort.js";

/** An HTTP check: a GET of `path` answered with a status from `minStatus` to `maxStatus`. */
export interface HttpCheck {
  /** Path and query, starting with "/". */
  readonly path: string;
  /** Lowest status accepted. */
  readonly minStatus: number;
  /** Highest status accepted. */
  readonly maxStatus: number;
}

/** What one try at a port found. */
export type ProbeResult =
  | { readonly ok: true; readonly address: string; readonly httpStatus: number }
  | { readonly ok: false; readonly address: string; readonly problem: string };

/** `host:port` as a URL writes it: an IPv6 address in brackets. */
export function addressText(host: string, port: number): string {
  return net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Tries once to connect to `host:port` (and, with `httpCheck`, to GET its path), giving up after
 * `timeoutMs` or when `signal` aborts. Never rejects: a failure is a result whose `problem` says
 * what was found ("connection refused", "HTTP 503", "timed out").
 */
export function probePort(
  host: string,
  port: number,
  httpCheck: HttpCheck | undefined,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<ProbeResult> {
  const address = addressText(host, port);
  if (signal.aborted) return Promise.resolve({ ok: false, address, problem: "cancelled" });
  return new Promise<ProbeResult>((resolve) => {
    let done = false;
    let release = () => {};
    const finish = (result: ProbeResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      listening.dispose();
      release();
      resolve(result);
    };
    const fail = (problem: string) => finish({ ok: false, address, problem });
    const timer = setTimeout(() => fail("timed out"), timeoutMs);
    const listening = onAbort(signal, () => fail("cancelled"));
    if (httpCheck === undefined) {
      const socket = net.connect({ host, port });
      release = () => socket.destroy();
      socket.once("connect", () => finish({ ok: true, address, httpStatus: 0 }));
      socket.once("error", (error) => fail(problemOf(error)));
      return;
    }
    // localhost is the name every dev server accepts in its Host header (Vite's allowed hosts, say).
    const hostHeader = host === "127.0.0.1" || host === "::1" ? `localhost:${port}` : address;
    const request = http.request({
      host,
      port,
      path: httpCheck.path,
      method: "GET",
      agent: false,
      headers: { host: hostHeader, connection: "close" },
    });
    release = () => request.destroy();
    request.once("response", (response) => {
      const status = response.statusCode ?? 0;
      response.resume();
      if (status >= httpCheck.minStatus && status <= httpCheck.maxStatus)
        finish({ ok: true, address, httpStatus: status });
      else fail(`HTTP ${status}`);
    });
    request.once("error", (error) => fail(problemOf(error)));
    request.end();
  });
}

/** A socket error in words: "connection refused" for ECONNREFUSED, else the code or message. */
function problemOf(error: Error): string {
  const code = (error as NodeJS.ErrnoException).code;
  switch (code) {
    case "ECONNREFUSED":
      return "connection refused";
    case "ECONNRESET":
      return "connection reset";
    case "EADDRNOTAVAIL":
      return "address not available";
    case "ENOTFOUND":
      return "host not found";
    default:
      return code ?? error.message;
  }
}
