import type http from "node:http";
import type http2 from "node:http2";
import type net from "node:net";
import { createContextKey, createContextValues, type ContextValues } from "@connectrpc/connect";

/**
 * What the listener tells every call about its connection, as connect-es context values: the
 * connection itself (for per-connection limits), who is calling, and a signal of the client going
 * away. {@link connectionContextValues} sets them; interceptors and handlers read them with the keys.
 *
 * @module
 */

/**
 * The connection a call arrived on (an HTTP/2 session or an HTTP/1.1 socket), set by
 * {@link connectionContextValues}.
 */
export const connectionKey = createContextKey<object | undefined>(undefined, { description: "sandboxd connection" });

/** Who is calling: the peer's address and port, and with mutual TLS its certificate's subject. */
export interface Peer {
  /** `address:port` of the client's end of the connection. */
  address: string;
  /** The client certificate's subject (`CN=...`), with mutual TLS. */
  subject?: string;
}

/** The {@link Peer} of a call, set by {@link connectionContextValues}. */
export const peerKey = createContextKey<Peer | undefined>(undefined, { description: "sandboxd peer" });

/**
 * An AbortSignal that fires as soon as the client resets the call's HTTP/2 stream (or closes its
 * HTTP/1.1 connection), set by {@link connectionContextValues}. It fires in the same turn as the
 * reset is read, where the handler context's signal comes a turn later: a call reset right after
 * its request (HEADERS, DATA, RST_STREAM in one packet) is seen as gone before it spawns anything.
 */
export const clientGoneKey = createContextKey<AbortSignal | undefined>(undefined, {
  description: "sandboxd client gone",
});

/**
 * Facts about a call that its handler adds for the call's log line (the file service's `path` and
 * bytes): a fresh object per call, set by {@link connectionContextValues}, read by the observe
 * interceptor when the call ends. Never a header, a token or a request body.
 */
export const callDetailsKey = createContextKey<Record<string, string | number> | undefined>(undefined, {
  description: "sandboxd call details",
});

/**
 * Builds the context values of a request for connectNodeAdapter's `contextValues`: the connection
 * it came on, so per-connection limits can count it, and a signal of the client going away.
 */
export function connectionContextValues(request: http.IncomingMessage | http2.Http2ServerRequest): ContextValues {
  const values = createContextValues();
  const stream = "stream" in request ? request.stream : undefined;
  const connection = stream !== undefined ? stream.session : request.socket;
  if (connection !== undefined && connection !== null) values.set(connectionKey, connection);
  const gone = new AbortController();
  if (stream !== undefined) {
    if (stream.destroyed) gone.abort();
    else stream.once("aborted", () => gone.abort());
  } else {
    // Held here: Node clears request.socket once the request is done.
    const socket = request.socket as net.Socket | null;
    if (socket === null || socket.destroyed) {
      gone.abort();
    } else {
      const onClose = () => gone.abort();
      socket.once("close", onClose);
      (request as http.IncomingMessage).once("close", () => socket.off("close", onClose));
    }
  }
  values.set(clientGoneKey, gone.signal);
  values.set(peerKey, peerOf(request.socket as net.Socket | null));
  values.set(callDetailsKey, {});
  return values;
}

function peerOf(socket: net.Socket | null): Peer | undefined {
  if (socket === null) return undefined;
  const host = socket.remoteAddress?.includes(":") ? `[${socket.remoteAddress}]` : socket.remoteAddress;
  const peer: Peer = { address: `${host ?? "?"}:${socket.remotePort ?? 0}` };
  const tlsSocket = socket as net.Socket & { getPeerCertificate?: () => { subject?: Record<string, string> } };
  const subject =
    typeof tlsSocket.getPeerCertificate === "function" ? tlsSocket.getPeerCertificate()?.subject : undefined;
  if (subject !== undefined && Object.keys(subject).length > 0) {
    peer.subject = Object.entries(subject)
      .map(([key, value]) => `${key}=${value}`)
      .join(",");
  }
  return peer;
}
