import net from "node:net";

/** Who sent a frame through an {@link H2FrameProxy}. */
export type FrameSender = "client" | "server";

/** A TCP proxy in front of an HTTP/2 server (prior knowledge) that shows each frame passing through. */
export interface H2FrameProxy {
  /** Base URL of the proxy, such as `http://127.0.0.1:40123`. */
  readonly url: string;
  /** Destroys every connection and stops listening. */
  close(): Promise<void>;
}

/** Calls `onFrame` with the type and payload of each HTTP/2 frame in a byte stream, after `prefaceBytes`. */
function frameParser(prefaceBytes: number, onFrame: (type: number, payload: Buffer) => void): (data: Buffer) => void {
  let pending: Buffer = Buffer.alloc(0);
  let prefaceLeft = prefaceBytes;
  return (data) => {
    pending = pending.length === 0 ? data : Buffer.concat([pending, data]);
    if (prefaceLeft > 0) {
      const skipped = Math.min(prefaceLeft, pending.length);
      pending = pending.subarray(skipped);
      prefaceLeft -= skipped;
    }
    while (pending.length >= 9) {
      const length = pending.readUIntBE(0, 3);
      if (pending.length < 9 + length) break;
      onFrame(pending[3]!, pending.subarray(9, 9 + length));
      pending = pending.subarray(9 + length);
    }
  };
}

/**
 * Starts the proxy on a free loopback port, forwarding to `target`; `onFrame` sees every frame of
 * every connection (the client's 24-byte connection preface skipped) as it passes.
 */
export async function startH2FrameProxy(
  target: { host: string; port: number },
  onFrame: (sender: FrameSender, type: number, payload: Buffer) => void,
): Promise<H2FrameProxy> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => sockets.delete(socket));
    }
    const fromClient = frameParser(24, (type, payload) => onFrame("client", type, payload));
    const fromServer = frameParser(0, (type, payload) => onFrame("server", type, payload));
    client.on("data", (data: Buffer) => {
      fromClient(data);
      upstream.write(data);
    });
    upstream.on("data", (data: Buffer) => {
      fromServer(data);
      client.write(data);
    });
    client.on("end", () => upstream.end());
    upstream.on("end", () => client.end());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
