import net from "node:net";

/** A TCP proxy in front of a server that can cut every connection through it on demand. */
export interface TcpProxy {
  /** Base URL of the proxy, such as `http://127.0.0.1:40123`. */
  readonly url: string;
  /** Connections accepted so far. */
  readonly connections: number;
  /** Connections cut so far by {@link cut}. */
  readonly cuts: number;
  /** Bytes sent from the server to clients so far. */
  readonly bytesDown: number;
  /**
   * Cuts every open connection at once, as a network failure does: both sides are reset (RST), so
   * whatever was in flight is lost. New connections are accepted as before. Returns how many were cut.
   */
  cut(): number;
  /** Refuse (reset) new connections while true, as a server that is down does. */
  refuse(refusing: boolean): void;
  /** Forwards new connections to `target` from now on (open ones stay), as a stable address in front of a restarted server. */
  retarget(target: { host: string; port: number }): void;
  /** Destroys every connection and stops listening. */
  close(): Promise<void>;
}

/** Starts a proxy on a free loopback port forwarding to `target`. */
export async function startTcpProxy(initialTarget: { host: string; port: number }): Promise<TcpProxy> {
  let target = initialTarget;
  const pairs = new Set<[net.Socket, net.Socket]>();
  let connections = 0;
  let cuts = 0;
  let bytesDown = 0;
  let refusing = false;
  const server = net.createServer((client) => {
    client.on("error", () => {});
    if (refusing) {
      client.resetAndDestroy();
      return;
    }
    connections++;
    const upstream = net.connect(target.port, target.host);
    upstream.on("error", () => {});
    const pair: [net.Socket, net.Socket] = [client, upstream];
    pairs.add(pair);
    upstream.on("data", (data: Buffer) => (bytesDown += data.length));
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("close", drop);
    upstream.on("close", drop);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get connections() {
      return connections;
    },
    get cuts() {
      return cuts;
    },
    get bytesDown() {
      return bytesDown;
    },
    cut() {
      let count = 0;
      for (const pair of [...pairs]) {
        pairs.delete(pair);
        for (const socket of pair) if (!socket.destroyed) socket.resetAndDestroy();
        count++;
      }
      cuts += count;
      return count;
    },
    refuse(value: boolean) {
      refusing = value;
    },
    retarget(next: { host: string; port: number }) {
      target = next;
    },
    async close() {
      for (const pair of pairs) for (const socket of pair) socket.destroy();
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
