import { startH2FrameProxy } from "../test/support/h2-frame-proxy.js";

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

/** Starts the counting proxy on a free loopback port, forwarding to `target` (HTTP/2 with prior knowledge). */
export async function startH2DataCounter(target: URL): Promise<H2DataCounter> {
  const data = { frames: 0, bytes: 0 };
  let clientMaxFrameSize = 16_384;
  const proxy = await startH2FrameProxy(
    { host: target.hostname, port: Number(target.port) },
    (sender, type, payload) => {
      if (sender === "server" && type === 0x0) {
        data.frames++;
        data.bytes += payload.length;
      } else if (sender === "client" && type === 0x4) {
        // SETTINGS: 6-byte entries; SETTINGS_MAX_FRAME_SIZE is 0x5.
        for (let at = 0; at + 6 <= payload.length; at += 6)
          if (payload.readUInt16BE(at) === 0x5)
            clientMaxFrameSize = Math.max(clientMaxFrameSize, payload.readUInt32BE(at + 2));
      }
    },
  );
  return {
    url: proxy.url,
    data,
    get clientMaxFrameSize() {
      return clientMaxFrameSize;
    },
    close: () => proxy.close(),
  };
}
