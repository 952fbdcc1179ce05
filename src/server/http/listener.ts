import http from "node:http";
import http2 from "node:http2";
import net, { type AddressInfo } from "node:net";
import type tls from "node:tls";
import {
  createConnectionBudget,
  defaultMaxConnectionsPerPeer,
  peerOfAddress,
  type BudgetedConnection,
} from "./connection-budget.js";

/** What every HTTP/2 connection starts with (RFC 9113 §3.4); no HTTP/1.x request can. */
const http2Preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/** Default time a cleartext connection may stay silent before its first bytes, in milliseconds. */
export const defaultPrefaceTimeoutMs = 10_000;
/**
 * Default time an HTTP/1.1 connection with no request in progress has to send the complete headers
 * of its next one, in milliseconds: the idle time of a kept-alive connection and a slowloris bound.
 */
export const defaultHeadersTimeoutMs = 10_000;
/** Default time from an HTTP/1.1 request's headers to the end of its body, in milliseconds. */
export const defaultRequestTimeoutMs = 60_000;
/** Default most connections open at once (see {@link ListenerOptions.maxConnections}). */
export const defaultMaxConnections = 1024;
/**
 * Time an HTTP/1.1 connection answered 408 is given to read the answer and close, in milliseconds;
 * it is destroyed then, whether the peer read it or not.
 */
export const timedOutCloseGraceMs = 1000;

/** A request handler for both HTTP versions, such as connectNodeAdapter's. */
export type RequestHandler = (
  request: http.IncomingMessage | http2.Http2ServerRequest,
  response: http.ServerResponse | http2.Http2ServerResponse,
) => void;

/** TLS material, PEM-encoded (file contents, not paths). */
export interface TlsOptions {
  /** The server's certificate chain. */
  cert: string | Buffer;
  /** The server's private key. */
  key: string | Buffer;
  /**
   * CA certificates clients must present a certificate signed by (mutual TLS). When undefined,
   * clients are not asked for a certificate.
   */
  clientCa?: string | Buffer;
}

/** Options for {@link createListener}. */
export interface ListenerOptions {
  /** Serve TLS (HTTP/2 and HTTP/1.1 chosen by ALPN); cleartext when undefined. */
  tls?: TlsOptions;
  /** Options of the HTTP/2 side: settings, session memory. */
  http2?: http2.ServerOptions;
  /** Called with each new HTTP/2 session, to watch its liveness for instance. */
  onSession?: (session: http2.ServerHttp2Session) => void;
  /**
   * Time a cleartext connection may stay silent before its first bytes, in milliseconds; it is then
   * closed. Default {@link defaultPrefaceTimeoutMs}.
   */
  prefaceTimeoutMs?: number;
  /**
   * Time an HTTP/1.1 connection with no request in progress has to send the complete headers of the
   * next one (at the start, and after each response); it is closed otherwise, with 408 when nothing
   * was answered on it yet. Default {@link defaultHeadersTimeoutMs}.
   */
  headersTimeoutMs?: number;
  /**
   * Time from an HTTP/1.1 request's headers to the end of its body, extended by as much again each
   * time body bytes arrived in the period before (an upload that goes on is not cut). Default
   * {@link defaultRequestTimeoutMs}.
   */
  requestTimeoutMs?: number;
  /**
   * Most connections open at once, every protocol counted. A newcomer to a full budget takes the
   * place of the oldest connection that made no authenticated call yet (see `proven`), of the peer
   * holding the most of them; it is closed at once when there is none. Default {@link defaultMaxConnections}.
   */
  maxConnections?: number;
  /**
   * Most connections one peer address (an IPv6 peer: its /64) may hold that made no authenticated
   * call yet; past it the peer's own oldest such connection is closed for the newcomer. 0 for no
   * such cap. Default a quarter of `maxConnections` ({@link defaultMaxConnectionsPerPeer}).
   */
  maxConnectionsPerPeer?: number;
  /**
   * Whether a connection (an HTTP/2 session or an HTTP/1.1 socket, as requests carry them) made a
   * call the daemon let through with the token: such connections are never closed for a newcomer.
   * Default: none is.
   */
  proven?: (connection: object) => boolean;
  /**
   * Called with each connection the budget closes: `displaced` (one that made no authenticated call,
   * for a newcomer) or `refused` (a newcomer, when every connection is proven). For metrics.
   */
  onTurnedAway?: (how: "displaced" | "refused") => void;
}

/**
 * One port for every protocol: gRPC, Connect and gRPC-Web over HTTP/2, and Connect and gRPC-Web over
 * HTTP/1.1. In cleartext a connection is handed to an HTTP/2 or an HTTP/1.1 server by its first
 * bytes, the HTTP/2 connection preface (Node's cleartext HTTP/2 server refuses HTTP/1.1); with TLS,
 * ALPN chooses. Every accepted socket has TCP_NODELAY set.
 */
export interface Listener {
  /** The server that owns the listening socket. */
  readonly server: net.Server;
  /** Open client connections: HTTP/2 sessions and HTTP/1.1 connections. */
  readonly connections: number;
  /** Listens on `host:port` (0 for a free port) and resolves with the bound port. */
  listen(port: number, host: string): Promise<number>;
  /** Stops accepting connections; resolves once every open one has closed. */
  close(): Promise<void>;
  /**
   * Asks every connection to finish: HTTP/2 sessions get GOAWAY and close after their last stream,
   * idle HTTP/1.1 connections close at once and busy ones after their response.
   */
  endConnections(): void;
  /** Destroys every connection at once. */
  destroyConnections(): void;
}

/** Creates a {@link Listener} serving `handler`; call `listen` to start. */
export function createListener(handler: RequestHandler, options: ListenerOptions = {}): Listener {
  const sessions = new Set<http2.ServerHttp2Session>();
  /** HTTP/1.1 sockets and the number of their responses in progress. */
  const http1Sockets = new Map<net.Socket, number>();
  /** Cleartext sockets whose first bytes have not yet told their protocol. */
  const undecided = new Set<net.Socket>();
  let ending = false;

  const maxConnections = options.maxConnections ?? defaultMaxConnections;
  const budget = createConnectionBudget({
    maxConnections,
    maxConnectionsPerPeer: options.maxConnectionsPerPeer ?? defaultMaxConnectionsPerPeer(maxConnections),
    onDisplaced: () => options.onTurnedAway?.("displaced"),
  });
  /**
   * The budget's entry of every accepted socket, by its address pair: the HTTP/2 session or TLS
   * socket later made on top of it is found by the same pair, and becomes what the entry asks
   * `proven` about and closes.
   */
  const accepted = new Map<string, BudgetedConnection & { connection: object; close: () => void }>();
  /** Counts a newly accepted TCP socket, making room if needed; false when it must be refused. */
  const admit = (socket: net.Socket): boolean => {
    const key = addressPair(socket);
    const entry = {
      peer: peerOfAddress(socket.remoteAddress),
      connection: socket as object,
      proven: () => options.proven?.(entry.connection) ?? false,
      close: () => socket.destroy(),
    };
    if (!budget.admit(entry)) {
      options.onTurnedAway?.("refused");
      return false;
    }
    accepted.set(key, entry);
    socket.once("close", () => {
      budget.release(entry);
      accepted.delete(key);
    });
    return true;
  };
  /** Makes `connection`, built on the accepted socket `socket`, what its budget entry asks and closes. */
  const adopt = (socket: net.Socket, connection: object, close: () => void) => {
    const entry = accepted.get(addressPair(socket));
    if (entry === undefined) return;
    entry.connection = connection;
    entry.close = close;
  };

  const trackSession = (session: http2.ServerHttp2Session) => {
    adopt(session.socket as net.Socket, session, () => session.destroy());
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
    options.onSession?.(session);
    if (ending) session.close();
  };
  const headersTimeoutMs = options.headersTimeoutMs ?? defaultHeadersTimeoutMs;
  const requestTimeoutMs = options.requestTimeoutMs ?? defaultRequestTimeoutMs;
  /** The timer of an HTTP/1.1 socket waiting for its next request's headers. */
  const waitingForHeaders = new Map<net.Socket, NodeJS.Timeout>();
  // Node arms its own HTTP/1.1 header and request timeouts only on a server that listens itself,
  // which the servers here never do: these timers stand in for them, on cleartext and TLS alike.
  const awaitHeaders = (socket: net.Socket, answeredBefore: boolean) => {
    clearTimeout(waitingForHeaders.get(socket));
    waitingForHeaders.set(
      socket,
      setTimeout(() => {
        waitingForHeaders.delete(socket);
        // An idle kept-alive connection closes silently: a 408 there could be read by a pooled client
        // as the answer to its next request.
        if (answeredBefore) {
          socket.destroySoon();
          return;
        }
        socket.end("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
        // end() only half-closes: a peer that never reads nor closes would hold the socket forever.
        const grace = setTimeout(() => socket.destroy(), timedOutCloseGraceMs);
        socket.once("close", () => clearTimeout(grace));
      }, headersTimeoutMs),
    );
  };
  const trackHttp1Socket = (socket: net.Socket) => {
    http1Sockets.set(socket, 0);
    awaitHeaders(socket, false);
    socket.once("close", () => {
      http1Sockets.delete(socket);
      clearTimeout(waitingForHeaders.get(socket));
      waitingForHeaders.delete(socket);
    });
    // HTTP/1.1 has no pings: TCP keepalive probes are what find a peer that vanished mid-stream.
    socket.setKeepAlive(true, 30_000);
  };
  const trackHttp1Request = (
    request: http.IncomingMessage | http2.Http2ServerRequest,
    response: http.ServerResponse | http2.Http2ServerResponse,
  ) => {
    if (request.httpVersionMajor !== 1) return;
    const socket = request.socket as net.Socket;
    const before = http1Sockets.get(socket);
    // A socket already gone (closed before its request got here) is not tracked again.
    if (before === undefined) return;
    http1Sockets.set(socket, before + 1);
    clearTimeout(waitingForHeaders.get(socket));
    waitingForHeaders.delete(socket);
    // A body still arriving (a large upload), or waiting for the server to take it, is not cut: the
    // deadline moves on by another period each time bytes came in since the last one.
    let bytesSeen = socket.bytesRead;
    const checkBody = () => {
      const incoming = request as http.IncomingMessage;
      if (socket.bytesRead === bytesSeen && incoming.readableLength === 0) return socket.destroy();
      bytesSeen = socket.bytesRead;
      bodyTimer = setTimeout(checkBody, requestTimeoutMs);
    };
    let bodyTimer = setTimeout(checkBody, requestTimeoutMs);
    (request as http.IncomingMessage).once("end", () => clearTimeout(bodyTimer));
    response.once("close", () => {
      clearTimeout(bodyTimer);
      const busy = http1Sockets.get(socket);
      if (busy === undefined) return;
      http1Sockets.set(socket, busy - 1);
      if (ending && busy === 1) socket.end();
      else if (busy === 1) awaitHeaders(socket, true);
    });
  };
  const serve: RequestHandler = (request, response) => {
    trackHttp1Request(request, response);
    handler(request, response);
  };

  let server: net.Server;
  if (options.tls !== undefined) {
    const { cert, key, clientCa } = options.tls;
    const secure = http2.createSecureServer(
      {
        ...options.http2,
        cert,
        key,
        allowHTTP1: true,
        // A TLS handshake that does not finish holds a socket: not for long.
        handshakeTimeout: options.prefaceTimeoutMs ?? defaultPrefaceTimeoutMs,
        ...(clientCa !== undefined ? { ca: clientCa, requestCert: true, rejectUnauthorized: true } : {}),
      },
      serve,
    );
    secure.on("session", trackSession);
    secure.on("connection", (socket: net.Socket) => {
      if (!admit(socket)) {
        socket.destroy();
        return;
      }
      socket.setNoDelay(true);
    });
    secure.on("secureConnection", (socket: tls.TLSSocket) => {
      if (socket.alpnProtocol === "h2") return;
      adopt(socket, socket, () => socket.destroy());
      trackHttp1Socket(socket);
    });
    server = secure;
  } else {
    const http2Server = http2.createServer(options.http2 ?? {}, serve);
    http2Server.on("session", trackSession);
    const http1Server = http.createServer(serve);
    const prefaceTimeoutMs = options.prefaceTimeoutMs ?? defaultPrefaceTimeoutMs;
    server = net.createServer((socket) => {
      if (!admit(socket)) {
        socket.destroy();
        return;
      }
      // Node's own HTTP servers set this on the sockets they accept; these are accepted here. Without
      // it, Nagle's algorithm held each small response frame until the client's delayed ACK: 40 ms
      // per streaming call on HTTP/1.1.
      socket.setNoDelay(true);
      undecided.add(socket);
      let received = Buffer.alloc(0);
      const silent = setTimeout(() => socket.destroy(), prefaceTimeoutMs);
      const decide = (isHttp2: boolean) => {
        clearTimeout(silent);
        undecided.delete(socket);
        socket.off("data", onData);
        socket.off("close", onClose);
        socket.pause();
        // The bytes read so far go back in front of the stream for the server that takes it over.
        socket.unshift(received);
        if (isHttp2) {
          // The HTTP/2 session reads the socket's buffer, then its handle, by itself.
          http2Server.emit("connection", socket);
        } else {
          trackHttp1Socket(socket);
          http1Server.emit("connection", socket);
          socket.resume();
        }
      };
      const onData = (chunk: Buffer) => {
        received = Buffer.concat([received, chunk]);
        const compared = Math.min(received.length, http2Preface.length);
        const prefix = received.subarray(0, compared).equals(http2Preface.subarray(0, compared));
        if (!prefix) decide(false);
        else if (received.length >= http2Preface.length) decide(true);
      };
      const onClose = () => {
        clearTimeout(silent);
        undecided.delete(socket);
      };
      socket.on("data", onData);
      socket.on("close", onClose);
      // Errors after the hand-over are the new owner's; before it, a reset peer is no news.
      socket.on("error", () => {});
      if (ending) socket.destroy();
    });
  }

  return {
    server,
    get connections() {
      return sessions.size + http1Sockets.size;
    },
    listen(port, host) {
      return new Promise<number>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => {
          server.off("error", reject);
          resolve((server.address() as AddressInfo).port);
        });
      });
    },
    close() {
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
    endConnections() {
      ending = true;
      for (const session of sessions) session.close();
      for (const [socket, busy] of http1Sockets) if (busy === 0) socket.end();
      for (const socket of undecided) socket.destroy();
    },
    destroyConnections() {
      for (const session of sessions) session.destroy();
      for (const socket of http1Sockets.keys()) socket.destroy();
      for (const socket of undecided) socket.destroy();
    },
  };
}

/** The address pair of a TCP connection, which no other open connection of the listener shares. */
function addressPair(socket: net.Socket): string {
  return `${socket.remoteAddress}|${socket.remotePort}|${socket.localAddress}|${socket.localPort}`;
}
