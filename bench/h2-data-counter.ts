import net from "node:net";

/** A TCP proxy in front of a daemon that counts the HTTP/2 DATA frames the daemon sends through it. */
export interface H2DataCounter {
  /** Base URL of the proxy, `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** DATA frames the server sent so far, and their payload bytes. */
  readonly data: { frames: number; bytes: number };
  /** The largest SETTINGS_MAX_FRAME_SIZE a client advertised (16384, the default, when none did). */
  readonly clientMaxFrameSize: number;
  /** Destroys every connection and stops listening. */
  close(): Promise<void>;
}

/** Calls `onFrame` with the type and payload of each HTTP/2 frame in a byte stream (after the client preface). */
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

/** Starts the counting proxy on a free loopback port, forwarding to `target` (HTTP/2 with prior knowledge). */
export async function startH2DataCounter(target: URL): Promise<H2DataCounter> {
  const data = { frames: 0, bytes: 0 };
  let clientMaxFrameSize = 16_384;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => sockets.delete(socket));
    }
    const fromClient = frameParser(24, (type, payload) => {
      // SETTINGS (0x4): 6-byte entries; SETTINGS_MAX_FRAME_SIZE is 0x5.
      if (type !== 0x4) return;
      for (let at = 0; at + 6 <= payload.length; at += 6)
        if (payload.readUInt16BE(at) === 0x5)
          clientMaxFrameSize = Math.max(clientMaxFrameSize, payload.readUInt32BE(at + 2));
    });
    const fromServer = frameParser(0, (type, payload) => {
      if (type !== 0x0) return;
      data.frames++;
      data.bytes += payload.length;
    });
    client.on("data", (chunk: Buffer) => {
      fromClient(chunk);
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      fromServer(chunk);
      client.write(chunk);
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
    data,
    get clientMaxFrameSize() {
      return clientMaxFrameSize;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
