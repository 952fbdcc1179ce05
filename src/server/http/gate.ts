import http2 from "node:http2";
import type { ConnectError } from "@connectrpc/connect";
import type net from "node:net";
import { createTokenCheck, isLoopbackHost, publicServices as defaultPublicServices, sandboxError } from "../rpc/index.js";
import { answerEarly as answerInProtocol, type AnyRequest, type AnyResponse } from "./early-answer.js";
import type { HttpEndpoints } from "./http-endpoints.js";
import type { RequestHandler } from "./listener.js";

/** Default calls of public services (health) in progress on one connection. */
export const defaultMaxPublicCallsPerConnection = 16;
/** Default calls of public services in progress on the whole daemon. */
export const defaultMaxPublicCalls = 256;
/** Default `Health/Watch` streams open on the whole daemon. */
export const defaultMaxWatchStreams = 64;
/** Default time a public call may take to send its whole request, in milliseconds. */
export const defaultPublicRequestTimeoutMs = 10_000;
/** Default calls a client may reset on one HTTP/2 connection within a second before it is closed. */
export const defaultMaxResetsPerSecond = 100;

/** Options for {@link createGate}. */
export interface GateOptions {
  /** The bearer token every call but those of `publicServices` must carry; none when undefined. */
  token?: string;
  /**
   * Accept any Host. When false (a daemon without a token that was not told `--insecure`), only
   * loopback host names and addresses are served: a browser page elsewhere cannot reach the daemon
   * by DNS rebinding.
   */
  anyHost: boolean;
  /** Services answered without a token. Default: `grpc.health.v1.Health`. */
  publicServices?: readonly string[];
  /** Calls of public services in progress on one connection. Default {@link defaultMaxPublicCallsPerConnection}. */
  maxPublicCallsPerConnection?: number;
  /** Calls of public services in progress on the daemon. Default {@link defaultMaxPublicCalls}. */
  maxPublicCalls?: number;
  /** `Health/Watch` streams open on the daemon. Default {@link defaultMaxWatchStreams}. */
  maxWatchStreams?: number;
  /** Time a public call may take to send its whole request. Default {@link defaultPublicRequestTimeoutMs}. */
  publicRequestTimeoutMs?: number;
  /**
   * Calls a client may reset (RST_STREAM) on one HTTP/2 connection within a second; past it the
   * connection gets GOAWAY (ENHANCE_YOUR_CALM) and is closed, as for Node's own rapid-reset defence
   * of unauthenticated streams. Default {@link defaultMaxResetsPerSecond}.
   */
  maxResetsPerSecond?: number;
  /**
   * Plain-HTTP health, metrics and CORS, answered after the Host check and before the checks on
   * calls (a preflight carries no token).
   */
  endpoints?: HttpEndpoints;
  /** Called with each call refused for its token, for logs and metrics. */
  onAuthFailure?: (request: AnyRequest) => void;
  /**
   * Answers a refused request (wrong Host, missing or wrong token, a limit), its body unread. Default
   * {@link answerEarly}: in the protocol the request's content type names.
   */
  refuse?: (request: AnyRequest, response: AnyResponse, refusal: ConnectError) => void;
}

/**
 * Creates the gate in front of the RPC handler: it decides on the headers alone, before a byte of the
 * request body is read, whether a call may go on. A wrong Host (no token) is PERMISSION_DENIED, a
 * missing or wrong bearer token UNAUTHENTICATED, each answered at once and the stream reset (see
 * {@link answerEarly}), so a caller without the token holds nothing open. Public services (health)
 * need no token but are bounded: calls per connection and in all, Watch streams, and the time to
 * send a request.
 */
export function createGate(handler: RequestHandler, options: GateOptions): Gate {
  const answerEarly = options.refuse ?? answerInProtocol;
  const hasToken = options.token === undefined ? undefined : createTokenCheck(options.token);
  const open = new Set(options.publicServices ?? defaultPublicServices);
  const maxPerConnection = options.maxPublicCallsPerConnection ?? defaultMaxPublicCallsPerConnection;
  const maxPublic = options.maxPublicCalls ?? defaultMaxPublicCalls;
  const maxWatch = options.maxWatchStreams ?? defaultMaxWatchStreams;
  const requestTimeoutMs = options.publicRequestTimeoutMs ?? defaultPublicRequestTimeoutMs;
  const perConnection = new WeakMap<object, number>();
  let publicCalls = 0;
  let watchStreams = 0;
  const admittedConnections = new WeakSet<object>();
  const provenConnections = new WeakSet<object>();
  const maxResets = options.maxResetsPerSecond ?? defaultMaxResetsPerSecond;
  const resets = new WeakMap<object, { second: number; count: number }>();
  /** Counts a call the client reset against its connection, which is closed past the limit. */
  const countResets = (request: AnyRequest) => {
    if (!("stream" in request) || request.stream === undefined) return;
    const stream = request.stream;
    stream.once("aborted", () => {
      const session = stream.session;
      if (session === undefined || session.destroyed) return;
      const second = Math.floor(performance.now() / 1000);
      const seen = resets.get(session);
      const count = seen !== undefined && seen.second === second ? seen.count + 1 : 1;
      resets.set(session, { second, count });
      if (count > maxResets) {
        session.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
        session.destroy();
      }
    });
  };

  const serve: RequestHandler = (request, response) => {
    // The Host first, before the plain-HTTP endpoints too: a page that reached a daemon without a
    // token by DNS rebinding must not read its metrics either.
    if (!options.anyHost) {
      const host = hostOf(request);
      if (host === undefined || !isLoopbackHost(host)) {
        return answerEarly(
          request,
          response,
          sandboxError(
            "HOST_NOT_ALLOWED",
            `host not allowed: ${JSON.stringify(host ?? "")}: a daemon without a token answers loopback names only (set a token to serve others)`,
            { metadata: { host: host ?? "" } },
          ),
        );
      }
    }
    if (options.endpoints?.answer(request, response)) return;
    options.endpoints?.decorate(request, response);
    const service = serviceOf(request.url ?? "");
    if (!open.has(service)) {
      if (hasToken !== undefined && !hasToken(request.headers.authorization)) {
        options.onAuthFailure?.(request);
        const missing = request.headers.authorization === undefined;
        return answerEarly(request, response, sandboxError("UNAUTHENTICATED", missing ? "missing bearer token" : "invalid bearer token"));
      }
      const connection = connectionOf(request);
      if (connection === undefined) return; // Reset before it got here.
      admittedConnections.add(connection);
      provenConnections.add(connection);
      countResets(request);
      return handler(request, response);
    }
    const connection = connectionOf(request);
    if (connection === undefined) return;
    const onConnection = perConnection.get(connection) ?? 0;
    const watch = (request.url ?? "").endsWith("/Watch");
    const refuse = (message: string, limit: string, value: number) =>
      answerEarly(request, response, sandboxError("LIMIT_EXCEEDED", message, { metadata: { limit, value: String(value) } }));
    if (onConnection >= maxPerConnection) {
      return refuse(`too many health calls on this connection: the limit of ${maxPerConnection} is reached`, "max-public-calls-per-connection", maxPerConnection);
    }
    if (publicCalls >= maxPublic) return refuse(`too many health calls: the limit of ${maxPublic} is reached`, "max-public-calls", maxPublic);
    if (watch && watchStreams >= maxWatch) return refuse(`too many health watches: the limit of ${maxWatch} is reached`, "max-watch-streams", maxWatch);
    admittedConnections.add(connection);
    perConnection.set(connection, onConnection + 1);
    publicCalls++;
    if (watch) watchStreams++;
    // A caller that sends headers and never the body must not hold the call open.
    const slow = setTimeout(() => destroyCall(request), requestTimeoutMs);
    request.once("end", () => clearTimeout(slow));
    response.once("close", () => {
      clearTimeout(slow);
      perConnection.set(connection, (perConnection.get(connection) ?? 1) - 1);
      publicCalls--;
      if (watch) watchStreams--;
    });
    handler(request, response);
  };
  return { serve, admitted: (connection) => admittedConnections.has(connection), proven: (connection) => provenConnections.has(connection) };
}

/** What {@link createGate} makes: the guarded handler and what it let through. */
export interface Gate {
  /** The handler to serve: the gate, then the RPC handler. */
  readonly serve: RequestHandler;
  /**
   * Whether a call on this connection (an HTTP/2 session or an HTTP/1.1 socket) was let through:
   * a connection that never gets one can be closed (see `startServer`).
   */
  admitted(connection: object): boolean;
  /**
   * Whether a call on this connection was let through with the token (any call but health on a
   * daemon without one): the listener never closes such a connection to make room for another.
   */
  proven(connection: object): boolean;
}

/** The service part of a request path, `/grpc.health.v1.Health/Check` -> `grpc.health.v1.Health`. */
function serviceOf(url: string): string {
  const path = url.split("?")[0];
  const end = path.indexOf("/", 1);
  return end < 0 ? path.slice(1) : path.slice(1, end);
}

function hostOf(request: AnyRequest): string | undefined {
  const host = request.headers[":authority"] ?? request.headers.host;
  if (typeof host !== "string" || host === "") return undefined;
  // "[::1]:7007" -> "[::1]", "localhost:7007" -> "localhost".
  const bracket = host.startsWith("[") ? host.indexOf("]") : -1;
  if (bracket > 0) return host.slice(0, bracket + 1);
  const colon = host.indexOf(":");
  return colon < 0 || host.indexOf(":", colon + 1) >= 0 ? host : host.slice(0, colon);
}

/** The HTTP/2 session or HTTP/1.1 socket of a request; undefined once a reset stream has let go of its session. */
function connectionOf(request: AnyRequest): object | undefined {
  if ("stream" in request && request.stream !== undefined) return request.stream.session ?? undefined;
  return (request.socket as net.Socket | null) ?? undefined;
}

function destroyCall(request: AnyRequest): void {
  if ("stream" in request && request.stream !== undefined) request.stream.close();
  else request.socket.destroy();
}
