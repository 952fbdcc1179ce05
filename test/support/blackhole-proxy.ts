import net from "node:net";

/**
 * A TCP proxy in front of a server that can turn into a black hole, as a vanished peer looks, or cut
 * every connection. (test/support/tcp-proxy.ts is the client SDK's reconnect proxy; this one is for
 * the server's side of dead peers and cuts.)
 */
export interface BlackholeProxy {
  /** Base URL of the proxy, such as `http://127.0.0.1:40123`. */
  readonly url: string;
  /** Connections accepted so far. */
  readonly connections: number;
  /**
   * Stops moving bytes in both directions without closing anything: no FIN, no RST, just silence,
   * as when a client's machine froze or its network went away. Applies to open and new connections,
   * or with `openOnly` to the open ones only (a path that died while new ones work, as after a NAT
   * entry or a load balancer's backend vanished).
   */
  blackhole(options?: { openOnly?: boolean }): void;
  /** Cuts every open connection at once with a TCP reset, as a dropped NAT entry or a crashed router does. */
  cutAll(): void;
  /** Destroys every connection and stops listening. */
  close(): Promise<void>;
}

/** Starts a proxy on a free loopback port forwarding to `target` (host and port). */
export async function startBlackholeProxy(target: { host: string; port: number }): Promise<BlackholeProxy> {
  const sockets = new Set<net.Socket>();
  let swallowing = false;
  let connections = 0;
  const silence = (client: net.Socket, upstream: net.Socket) => {
    client.unpipe(upstream);
    upstream.unpipe(client);
    // Stop reading: what the server sends piles up unread and unanswered.
    upstream.pause();
    client.pause();
  };
  const pairs: Array<[net.Socket, net.Socket]> = [];
  const server = net.createServer((client) => {
    connections++;
    const upstream = net.connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => sockets.delete(socket));
    }
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    pairs.push([client, upstream]);
    if (swallowing) return silence(client, upstream);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get connections() {
      return connections;
    },
    blackhole(options = {}) {
      swallowing = options.openOnly !== true;
      for (const [client, upstream] of pairs) silence(client, upstream);
    },
    cutAll() {
      for (const socket of sockets) socket.resetAndDestroy();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
