import http2 from "node:http2";
import type net from "node:net";
import {
  createTokenCheck,
  isLoopbackHost,
  publicServices as defaultPublicServices,
  sandboxError,
} from "../rpc/index.js";
import type { ConnectError } from "@connectrpc/connect";
import {
  answerEarly as answerInProtocol,
  prepareRefusal,
  type AnyRequest,
  type AnyResponse,
  type PreparedRefusal,
} from "./early-answer.js";
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
/**
 * Refusals answered per turn of the event loop to connections that made no call with the token yet;
 * the rest wait for the next turns, in arrival order.
 */
export const refusalsPerTurn = 32;
/**
 * Refusals answered per second, at most, to connections that made no call with the token yet (a
 * burst of a tenth of it at once). Past it they wait, and so does the flood: each connection has
 * few streams before its first call with the token, and sends no more while they wait.
 */
export const refusalsPerSecond = 2000;
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
   * {@link answerInProtocol}: in the protocol the request's content type names.
   */
  refuse?: (request: AnyRequest, response: AnyResponse, refusal: ConnectError) => void;
  /**
   * Called once per connection (an HTTP/2 session or an HTTP/1.1 socket) with its first call let
   * through with the token (any call but health on a daemon without one): see {@link Gate.proven}.
   */
  onProven?: (connection: object) => void;
  /** Called once per connection with the first call refused on it before it was proven. */
  onRefusedUnproven?: (connection: object) => void;
  /**
   * Lets a call that carries no `authorization` header through as if it carried the token, when this
   * says so for its service (the part of the path before the method), request and connection (its
   * HTTP/2 session or HTTP/1.1 socket): the KEP-539.2 ports' trusted peers. A wrong token is refused
   * all the same.
   */
  trusted?: (service: string, request: AnyRequest, connection: object) => boolean;
}

/**
 * Creates the gate in front of the RPC handler: it decides on the headers alone, before a byte of the
 * request body is read, whether a call may go on. A wrong Host (no token) is PERMISSION_DENIED, a
 * missing or wrong bearer token UNAUTHENTICATED, each answered at once and the stream reset (see
 * {@link answerInProtocol}), so a caller without the token holds nothing open. Public services (health)
 * need no token but are bounded: calls per connection and in all, Watch streams, and the time to
 * send a request.
 */
export function createGate(handler: RequestHandler, options: GateOptions): Gate {
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
  const refusedConnections = new WeakSet<object>();
  const maxResets = options.maxResetsPerSecond ?? defaultMaxResetsPerSecond;
  const resets = new WeakMap<object, { second: number; count: number }>();
  // Encoded once (for the default answer): a flood of calls without the token, or beyond the health
  // limits, is answered without an error object or an encoding per call.
  const refusal = (error: ConnectError): Refusal => ({
    error,
    prepared: options.refuse === undefined ? prepareRefusal(error) : undefined,
  });
  const refusals = {
    missingToken: refusal(sandboxError("UNAUTHENTICATED", "missing bearer token")),
    invalidToken: refusal(sandboxError("UNAUTHENTICATED", "invalid bearer token")),
    perConnection: refusal(
      limitExceeded(
        `too many health calls on this connection: the limit of ${maxPerConnection} is reached`,
        "max-public-calls-per-connection",
        maxPerConnection,
      ),
    ),
    public: refusal(
      limitExceeded(`too many health calls: the limit of ${maxPublic} is reached`, "max-public-calls", maxPublic),
    ),
    watch: refusal(
      limitExceeded(`too many health watches: the limit of ${maxWatch} is reached`, "max-watch-streams", maxWatch),
    ),
  };
  const answer = (request: AnyRequest, response: AnyResponse, { error, prepared }: Refusal) => {
    if (options.refuse !== undefined) options.refuse(request, response, error);
    else answerInProtocol(request, response, prepared ?? error);
  };

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

  /**
   * Refusals to unproven connections wait here and are answered at most {@link refusalsPerTurn} per
   * loop turn and {@link refusalsPerSecond} per second: a flood of calls without the token gets its
   * answers at the pace the daemon can spare, and as a connection's streams are answered slower, it
   * sends new ones slower (its stream limit holds it), while honest calls are served in every turn.
   */
  const queued: Array<() => void> = [];
  let nextQueued = 0;
  let drainScheduled = false;
  const burst = refusalsPerSecond / 10;
  let allowance = burst;
  let refilledAt = performance.now();
  const drain = () => {
    drainScheduled = false;
    const now = performance.now();
    allowance = Math.min(burst, allowance + ((now - refilledAt) * refusalsPerSecond) / 1000);
    refilledAt = now;
    const end = Math.min(queued.length, nextQueued + refusalsPerTurn, nextQueued + Math.floor(allowance));
    allowance -= end - nextQueued;
    while (nextQueued < end) {
      const answer = queued[nextQueued];
      queued[nextQueued++] = noop;
      answer();
    }
    if (nextQueued === queued.length) {
      queued.length = 0;
      nextQueued = 0;
    } else {
      drainScheduled = true;
      // With allowance left, the next turn; without, once a few refusals' worth has come back.
      if (allowance >= 1) setImmediate(drain);
      else setTimeout(drain, Math.ceil((refusalsPerTurn * 1000) / refusalsPerSecond));
    }
  };
  const refuse = (request: AnyRequest, response: AnyResponse, refusal: Refusal) => {
    const connection = connectionOf(request);
    if (connection !== undefined && provenConnections.has(connection)) return answer(request, response, refusal);
    if (connection !== undefined && !refusedConnections.has(connection)) {
      refusedConnections.add(connection);
      options.onRefusedUnproven?.(connection);
    }
    queued.push(() => answer(request, response, refusal));
    if (!drainScheduled) {
      drainScheduled = true;
      setImmediate(drain);
    }
  };

  const isTrusted = (service: string, request: AnyRequest) => {
    const connection = options.trusted === undefined ? undefined : connectionOf(request);
    return connection !== undefined && options.trusted!(service, request, connection);
  };

  const serve: RequestHandler = (request, response) => {
    // The Host first, before the plain-HTTP endpoints too: a page that reached a daemon without a
    // token by DNS rebinding must not read its metrics either.
    if (!options.anyHost) {
      const host = hostOf(request);
      if (host === undefined || !isLoopbackHost(host)) {
        return refuse(request, response, {
          error: sandboxError(
            "HOST_NOT_ALLOWED",
            `host not allowed: ${JSON.stringify(host ?? "")}: a daemon without a token answers loopback names only (set a token to serve others)`,
            { metadata: { host: host ?? "" } },
          ),
        });
      }
    }
    if (options.endpoints?.answer(request, response)) return;
    options.endpoints?.decorate(request, response);
    const service = serviceOf(request.url ?? "");
    if (!open.has(service)) {
      if (
        hasToken !== undefined &&
        !hasToken(request.headers.authorization) &&
        !(request.headers.authorization === undefined && isTrusted(service, request))
      ) {
        options.onAuthFailure?.(request);
        return refuse(
          request,
          response,
          request.headers.authorization === undefined ? refusals.missingToken : refusals.invalidToken,
        );
      }
      const connection = connectionOf(request);
      if (connection === undefined) return; // Reset before it got here.
      admittedConnections.add(connection);
      if (!provenConnections.has(connection)) {
        provenConnections.add(connection);
        options.onProven?.(connection);
      }
      countResets(request);
      return handler(request, response);
    }
    const connection = connectionOf(request);
    if (connection === undefined) return;
    const onConnection = perConnection.get(connection) ?? 0;
    const watch = (request.url ?? "").endsWith("/Watch");
    if (onConnection >= maxPerConnection) return refuse(request, response, refusals.perConnection);
    if (publicCalls >= maxPublic) return refuse(request, response, refusals.public);
    if (watch && watchStreams >= maxWatch) return refuse(request, response, refusals.watch);
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
  return {
    serve,
    admitted: (connection) => admittedConnections.has(connection),
    proven: (connection) => provenConnections.has(connection),
  };
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

function noop(): void {}

/** A refusal the gate answers: the error, and its encoding for the default answer when prepared. */
interface Refusal {
  error: ConnectError;
  prepared?: PreparedRefusal;
}

/** A LIMIT_EXCEEDED refusal naming the limit and its value. */
function limitExceeded(message: string, limit: string, value: number) {
  return sandboxError("LIMIT_EXCEEDED", message, { metadata: { limit, value: String(value) } });
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
