import { startH2FrameProxy } from "./h2-frame-proxy.js";

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

/** Starts the counting proxy on a free loopback port, forwarding to `target` (HTTP/2 with prior knowledge). */
export async function startH2FrameCounter(target: { host: string; port: number }): Promise<H2FrameCounter> {
  const counts = new Map<number, number>();
  const goAwayCodes: number[] = [];
  const proxy = await startH2FrameProxy(target, (sender, type, payload) => {
    if (sender === "client") counts.set(type, (counts.get(type) ?? 0) + 1);
    else if (type === 0x7 && payload.length >= 8) goAwayCodes.push(payload.readUInt32BE(4));
  });
  return {
    url: proxy.url,
    framesOfType: (type) => counts.get(type) ?? 0,
    serverGoAwayCodes: goAwayCodes,
    close: () => proxy.close(),
  };
}
