import http2 from "node:http2";
import type { AddressInfo } from "node:net";

/** An HTTP/2 reverse proxy in front of a server that can go away gracefully, as a daemon being reloaded does. */
export interface Http2Proxy {
  /** Base URL of the proxy. */
  readonly url: string;
  /** Client connections accepted so far. */
  readonly connections: number;
  /**
   * Sends every client connection a graceful GOAWAY (NO_ERROR), then after `closeAfterMs` destroys
   * those connections with the streams still open on them, as a reloading server does once its
   * drain time is over. New connections are accepted as before.
   */
  goAway(closeAfterMs?: number): Promise<void>;
  /** Closes everything. */
  close(): Promise<void>;
}

/** Starts an HTTP/2 proxy on a free loopback port forwarding every stream (trailers included) to `targetUrl`. */
export async function startHttp2Proxy(targetUrl: string): Promise<Http2Proxy> {
  const upstream = http2.connect(targetUrl);
  upstream.on("error", () => {});
  const sessions = new Set<http2.ServerHttp2Session>();
  let connections = 0;
  const server = http2.createServer();
  server.on("session", (session) => {
    connections++;
    sessions.add(session);
    session.on("error", () => {});
    session.once("close", () => sessions.delete(session));
  });
  server.on("stream", (down, headers) => {
    down.on("error", () => {});
    const forwarded: http2.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(headers))
      if (name !== ":scheme" && name !== ":authority") forwarded[name] = value;
    const up = upstream.request(forwarded);
    up.on("error", () => down.destroy());
    let trailers: http2.IncomingHttpHeaders = {};
    up.on("response", (responseHeaders) => {
      const response: http2.OutgoingHttpHeaders = {};
      for (const [name, value] of Object.entries(responseHeaders))
        if (!name.startsWith(":") || name === ":status") response[name] = value;
      down.respond(response, { waitForTrailers: true });
      up.pipe(down);
    });
    up.on("trailers", (received) => (trailers = received));
    down.on("wantTrailers", () => {
      const sent: http2.OutgoingHttpHeaders = {};
      for (const [name, value] of Object.entries(trailers)) if (!name.startsWith(":")) sent[name] = value;
      down.sendTrailers(sent);
    });
    down.pipe(up);
    down.on("close", () => up.close());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get connections() {
      return connections;
    },
    async goAway(closeAfterMs = 50) {
      const leaving = [...sessions];
      for (const session of leaving) session.goaway(http2.constants.NGHTTP2_NO_ERROR);
      await new Promise((resolve) => setTimeout(resolve, closeAfterMs));
      for (const session of leaving) session.destroy();
    },
    async close() {
      for (const session of sessions) session.destroy();
      upstream.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
