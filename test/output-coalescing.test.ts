import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { maxOutputMessageBytes } from "../src/server/rpc/sandbox-service.js";
import { waitFor } from "./support/processes.js";
import { createUncompressedClient, deterministicBytes, deterministicBytesCommand } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const mebibyte = 1024 * 1024;

let t: TestServer;
let bulk: ReturnType<typeof createUncompressedClient>;
beforeAll(async () => {
  t = await startTestServer();
  bulk = createUncompressedClient(t.server.url);
});
afterAll(async () => {
  bulk.close();
  await t.close();
});

/** Output messages as a client received them: offset and length, with the bytes joined. */
function collector() {
  const sizes: number[] = [];
  const parts: Uint8Array[] = [];
  let next = 0n;
  return {
    sizes,
    take(offset: bigint, data: Uint8Array) {
      if (offset !== next) throw new Error(`chunk at ${offset}, expected ${next}`);
      next += BigInt(data.length);
      sizes.push(data.length);
      parts.push(data);
    },
    bytes: () => Buffer.concat(parts),
  };
}

describe("output messages", () => {
  it("grow up to 1 MiB while an Exec caller lags, with the same bytes and offsets", async () => {
    const size = 24 * mebibyte + 7;
    const expected = deterministicBytes(size);
    const received = collector();
    const events = bulk.client.exec({ spec: { command: deterministicBytesCommand(size) } })[Symbol.asyncIterator]();
    const first = await events.next();
    expect(first.value?.event.case).toBe("started");
    const processId = first.value!.event.value.processId as string;
    // The caller stops reading: HTTP/2 flow control stops the daemon's sends, output piles up in
    // the daemon's buffer (8 MiB by default) and then holds the command back.
    await waitFor(() => t.server.manager.get(processId).outputOffsets.stdout >= 6 * mebibyte, {
      timeoutMs: 60_000,
      what: "the daemon to read 6 MiB the caller has not",
    });
    let exited = false;
    for (let next = await events.next(); !next.done; next = await events.next()) {
      const event = next.value.event;
      if (event.case === "output") received.take(event.value.offset, event.value.data);
      if (event.case === "exited") exited = true;
    }
    expect(exited).toBe(true);
    expect(received.bytes().equals(expected)).toBe(true);
    // What had piled up went out in large messages; none beyond the cap.
    expect(Math.max(...received.sizes)).toBeGreaterThanOrEqual(512 * 1024);
    expect(Math.max(...received.sizes)).toBeLessThanOrEqual(maxOutputMessageBytes);
  }, 120_000);

  it("of StreamLogs from retained output are as large as a message takes, in order and exact", async () => {
    const size = 5 * maxOutputMessageBytes + 3;
    const expected = deterministicBytes(size);
    const started = await t.client.startProcess({ spec: { command: deterministicBytesCommand(size) } });
    const processId = started.process!.processId;
    await waitFor(() => t.server.manager.get(processId).outputEnded, { timeoutMs: 60_000, what: "the output to end" });
    const received = collector();
    for await (const response of bulk.client.streamLogs({ processId, follow: true })) {
      const event = response.event;
      if (event.case === "output") received.take(event.value.offset, event.value.data);
    }
    expect(received.bytes().equals(expected)).toBe(true);
    // Everything was there when the reader asked: the most a message takes, the rest in the last.
    const most = maxOutputMessageBytes;
    expect(received.sizes).toEqual([most, most, most, most, most, 3]);
  }, 120_000);

  it("are not held back to be joined: a caller that keeps up gets each write while the command runs", async () => {
    const controller = new AbortController();
    const seen: string[] = [];
    try {
      for await (const response of bulk.client.exec(
        { spec: { command: "printf first; sleep 30" } },
        { signal: controller.signal },
      )) {
        const event = response.event;
        if (event.case === "output") {
          seen.push(Buffer.from(event.value.data).toString());
          break;
        }
      }
    } finally {
      controller.abort();
    }
    expect(seen).toEqual(["first"]);
  }, 60_000);
});
