import http2 from "node:http2";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { assertTokenMayGo } from "./daemon-address.js";
import { isShuttingDownAnswer } from "./reconnect-policy.js";

/** Wire protocol of a {@link SandboxConnection}: gRPC, or Connect (JSON-free binary Connect, HTTP/2 too). */
export type SandboxProtocol = "grpc" | "connect";

/** Options for {@link createSandboxConnection}. */
export interface SandboxConnectionOptions {
  /** Base URL of the daemon, such as `http://127.0.0.1:7007`. */
  baseUrl: string;
  /** Wire protocol. Default `"grpc"`. Both run over HTTP/2. */
  protocol?: SandboxProtocol;
  /**
   * Bearer token sent as `Authorization: Bearer <token>` on every call; none when undefined or empty. It goes in
   * clear (`http://`) only to a loopback host, unless {@link allowCleartextToken} says otherwise.
   */
  token?: string;
  /**
   * Send the token over plain `http://` to a host that is not loopback. Default false: such a
   * connection is refused with a SandboxError `INVALID_ARGUMENT`, since anyone on the path could read
   * the token and run commands with it. Set it only on a network you trust.
   */
  allowCleartextToken?: boolean;
  /** Extra request headers sent on every call. */
  headers?: Record<string, string>;
  /**
   * Advertise gzip and brotli in the calls' accept-encoding header. Default true. The daemon
   * never compresses its responses (they are mostly output, often already compressed or binary),
   * so this changes only the headers sent; it matters for a server or proxy that does compress.
   */
  acceptCompression?: boolean;
  /**
   * Largest request message sent, in bytes; larger ones fail locally with RESOURCE_EXHAUSTED naming
   * the limit. Default 4 MiB, the daemon's default `--max-message-bytes`: raise both together. Sending
   * more than the daemon accepts would only earn its refusal, and more than about 10 MB in flight
   * makes Node's HTTP/2 session reset the stream (ENHANCE_YOUR_CALM) before that refusal is read.
   */
  maxMessageBytes?: number;
  /**
   * Milliseconds without a byte from the daemon after which the connection is checked with an
   * HTTP/2 PING while a call is open (and before a call on a connection idle that long). Default
   * 15000. Together with {@link pingTimeoutMs} it bounds how long a silently dead path (a proxy or
   * route that stops forwarding without closing) can hold a call: within `pingIntervalMs +
   * pingTimeoutMs` of the last byte read, 25 s by default, the connection is given up and its calls
   * fail with UNAVAILABLE; a background handle then reconnects on a new one.
   */
  pingIntervalMs?: number;
  /** Milliseconds a PING may go unanswered before the connection is given up; default 10000. */
  pingTimeoutMs?: number;
  /** Interceptors run on every call, after the one that adds the headers (connect-es's `Interceptor`). */
  interceptors?: readonly Interceptor[];
}

/** Default of {@link SandboxConnectionOptions.pingIntervalMs}. */
export const defaultPingIntervalMs = 15_000;
/** Default of {@link SandboxConnectionOptions.pingTimeoutMs}. */
export const defaultPingTimeoutMs = 10_000;

/** Default of {@link SandboxConnectionOptions.maxMessageBytes}. */
export const defaultClientMaxMessageBytes = 4 * 1024 * 1024;

/**
 * SandboxConnection is one HTTP/2 connection to a daemon with the transport built on it. It counts
 * graceful GOAWAY frames (NO_ERROR) the daemon sends, so a stream that breaks right after one can be
 * told apart from a network failure and resumed at once.
 */
export interface SandboxConnection {
  /** The transport for `createClient`. */
  readonly transport: Transport;
  /** Graceful GOAWAY frames received so far on any connection of this client. */
  readonly goAwayCount: number;
  /** Closes the connection and every call on it. */
  close(): void;
}

/** HTTP/2 receive window of each stream, in bytes. */
const streamWindowBytes = 4 * 1024 * 1024;
/** HTTP/2 receive window of each connection, in bytes. */
const connectionWindowBytes = 16 * 1024 * 1024;
/**
 * Largest HTTP/2 frame the daemon may send, in bytes (SETTINGS_MAX_FRAME_SIZE). The daemon sends
 * output in messages of up to 1 MiB; with HTTP/2's default of 16 KiB each one is cut into 64 DATA
 * frames, each a header to write and parse and a pass through both sides' HTTP/2 stacks. 4 MiB, as
 * grpc-core advertises, lets a message travel as one frame.
 */
const maxFrameBytes = 4 * 1024 * 1024;

/**
 * An Http2SessionManager that PINGs its connection (connect-node's keepalive, see
 * {@link SandboxConnectionOptions.pingIntervalMs}) and notices graceful GOAWAY frames: a daemon
 * going away (hot reload, restart behind a load balancer) sends one before it closes the connection.
 */
class GoAwayCountingSessionManager extends Http2SessionManager {
  goAwayCount = 0;
  private readonly watched = new WeakSet<http2.Http2Session>();
  /** How many sessions calls have used so far; the newest is `newest`, numbered `opened`. */
  private opened = 0;
  private newest?: http2.ClientHttp2Session;

  constructor(url: string, maxMessageBytes: number, ping: { pingIntervalMs: number; pingTimeoutMs: number }) {
    // Node's 64 KiB receive windows let the daemon send one output message per WINDOW_UPDATE round
    // trip; wide windows let bulk output flow (256 MiB through Exec: 45 MB/s before, 113 after).
    // The session's memory must hold a message being sent when the answer arrives.
    super(
      url,
      { ...ping, pingIdleConnection: false },
      {
        settings: { initialWindowSize: streamWindowBytes, maxFrameSize: maxFrameBytes },
        maxSessionMemory: Math.max(10, Math.ceil((2 * maxMessageBytes) / (1024 * 1024)) + 8),
      },
    );
  }

  override async request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">,
  ): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(method, path, headers, options);
    const session = stream.session;
    if (session !== undefined && !this.watched.has(session)) {
      this.watched.add(session);
      this.opened++;
      this.newest = session as http2.ClientHttp2Session;
      (session as http2.ClientHttp2Session).setLocalWindowSize(connectionWindowBytes);
      session.on("goaway", (errorCode: number) => {
        if (errorCode === http2.constants.NGHTTP2_NO_ERROR) this.goAwayCount++;
      });
      // A session given up because a PING went unanswered is destroyed with an error Node emits
      // once its socket has closed; a call made before that replaces the session and takes
      // connect-node's error listener off it. The error is connect-node's to report (its calls
      // fail with it); without a listener here it would crash the process.
      session.on("error", () => {});
    }
    return stream;
  }

  /** The number of the session a call made now runs on: the newest while it is open, else the next. */
  sessionForNextCall(): number {
    return this.newest !== undefined && !this.newest.closed && !this.newest.destroyed ? this.opened : this.opened + 1;
  }

  /**
   * Closes the session numbered `session` (see {@link sessionForNextCall}) gracefully, when it is still
   * the newest: its calls run to their end, the next ones open a new connection. For a session whose
   * daemon said it is shutting down: a call retried on it would be refused at once, again and again,
   * until the daemon closes it.
   */
  retire(session: number): void {
    const newest = this.newest;
    if (session !== this.opened || newest === undefined || newest.closed || newest.destroyed) return;
    newest.close();
  }
}

/**
 * An interceptor that retires the HTTP/2 session a call ran on once the daemon answered it with
 * SHUTTING_DOWN, for unary calls and while a stream's messages are read.
 */
function retireOnShutdown(manager: GoAwayCountingSessionManager): Interceptor {
  return (next) => async (request) => {
    const session = manager.sessionForNextCall();
    const retireIfShuttingDown = (error: unknown) => {
      if (isShuttingDownAnswer(error)) manager.retire(session);
    };
    try {
      const response = await next(request);
      if (!response.stream) return response;
      return { ...response, message: watchFailure(response.message, retireIfShuttingDown) };
    } catch (error) {
      retireIfShuttingDown(error);
      throw error;
    }
  };
}

/** `messages`, with `onFailure` told of the error that ends them, if one does. */
async function* watchFailure<T>(messages: AsyncIterable<T>, onFailure: (error: unknown) => void): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (error) {
    onFailure(error);
    throw error;
  }
}

/**
 * Creates a connection to a daemon: the transport for the chosen protocol over one HTTP/2 session,
 * kept alive and checked with PINGs. Throws a SandboxError `INVALID_ARGUMENT` when a token (the
 * `token` option or an `authorization` header) would go over plain `http://` to a host that is not
 * loopback and {@link SandboxConnectionOptions.allowCleartextToken} does not allow it.
 */
export function createSandboxConnection(options: SandboxConnectionOptions): SandboxConnection {
  // A token as `token` or as an authorization header of its own goes in clear only where it may.
  const token = options.token === "" ? undefined : options.token;
  const sendsCredentials =
    token !== undefined || Object.keys(options.headers ?? {}).some((name) => name.toLowerCase() === "authorization");
  if (sendsCredentials && URL.canParse(options.baseUrl)) {
    assertTokenMayGo(new URL(options.baseUrl), options.baseUrl, options);
  }
  const maxMessageBytes = options.maxMessageBytes ?? defaultClientMaxMessageBytes;
  const sessionManager = new GoAwayCountingSessionManager(options.baseUrl, maxMessageBytes, {
    pingIntervalMs: options.pingIntervalMs ?? defaultPingIntervalMs,
    pingTimeoutMs: options.pingTimeoutMs ?? defaultPingTimeoutMs,
  });
  const interceptors: Interceptor[] = [retireOnShutdown(sessionManager)];
  const headers = {
    ...options.headers,
    ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}),
  };
  if (Object.keys(headers).length > 0) {
    interceptors.push((next) => (request) => {
      for (const [name, value] of Object.entries(headers)) request.header.set(name, value);
      return next(request);
    });
  }
  interceptors.push(...(options.interceptors ?? []));
  const common = {
    baseUrl: options.baseUrl,
    httpVersion: "2" as const,
    sessionManager,
    interceptors,
    writeMaxBytes: maxMessageBytes,
    ...(options.acceptCompression === false ? { acceptCompression: [] } : {}),
  };
  const transport = options.protocol === "connect" ? createConnectTransport(common) : createGrpcTransport(common);
  return {
    transport,
    get goAwayCount() {
      return sessionManager.goAwayCount;
    },
    close() {
      sessionManager.abort();
    },
  };
}
