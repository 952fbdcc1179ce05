import net from "node:net";

/** A TCP proxy that counts the HTTP/2 frames clients send through it, by frame type. */
export interface H2FrameCounter {
  /** Base URL of the proxy, such as `http://127.0.0.1:40123`. */
  readonly url: string;
  /** Frames sent by clients so far, by type (0x3 is RST_STREAM, 0x7 GOAWAY...). */
  framesOfType(type: number): number;
  /** GOAWAY frames the server sent, with their error codes. */
  readonly serverGoAwayCodes: readonly number[];
  /** Destroys every connection and stops listening. */
  close(): Promise<void>;
}

/** The HTTP/2 frames in a byte stream, after the client's connection preface when it has one. */
function frameParser(expectPreface: boolean, onFrame: (type: number, payload: Buffer) => void): (data: Buffer) => void {
  let pending = Buffer.alloc(0);
  let prefaceLeft = expectPreface ? 24 : 0;
  return (data) => {
    pending = Buffer.concat([pending, data]);
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

/** Starts the counting proxy on a free loopback port, forwarding to `target` (HTTP/2 with prior knowledge). */
export async function startH2FrameCounter(target: { host: string; port: number }): Promise<H2FrameCounter> {
  const counts = new Map<number, number>();
  const goAwayCodes: number[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => sockets.delete(socket));
    }
    const fromClient = frameParser(true, (type) => counts.set(type, (counts.get(type) ?? 0) + 1));
    const fromServer = frameParser(false, (type, payload) => {
      if (type === 0x7 && payload.length >= 8) goAwayCodes.push(payload.readUInt32BE(4));
    });
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
    framesOfType: (type) => counts.get(type) ?? 0,
    serverGoAwayCodes: goAwayCodes,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
