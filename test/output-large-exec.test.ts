import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutputStream } from "../gen/sandbox/v1/sandbox_pb.js";
import {
  createUncompressedClient,
  deterministicBytes,
  deterministicBytesCommand,
  deterministicBytesSha256,
  ProcessStatus,
} from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const gibibyte = 1024 * 1024 * 1024;
const capacityBytes = 1024 * 1024;

let t: TestServer;
let bulk: ReturnType<typeof createUncompressedClient>;
let expectedSha256: string;
beforeAll(async () => {
  // Computed before the server runs: hashing a gibibyte blocks this process for a few seconds.
  expectedSha256 = deterministicBytesSha256(gibibyte);
  // A small retained buffer: the Exec caller's pace, not memory, must decide how fast output flows.
  t = await startTestServer({ outputCapacityBytes: capacityBytes });
  bulk = createUncompressedClient(t.server.url);
}, 60_000);
afterAll(async () => {
  bulk.close();
  await t.close();
});

describe("Exec output", () => {
  it("delivers 1 GiB of binary output byte-exact (sha256) with contiguous offsets", async () => {
    const hash = createHash("sha256");
    let next = 0n;
    let exitedStdoutBytes = -1n;
    let status = ProcessStatus.UNSPECIFIED;
    const startedAt = performance.now();
    for await (const response of bulk.client.exec({ spec: { command: deterministicBytesCommand(gibibyte) } })) {
      const event = response.event;
      if (event.case === "output") {
        expect(event.value.stream).toBe(OutputStream.STDOUT);
        if (event.value.offset !== next) throw new Error(`chunk at ${event.value.offset}, expected ${next}`);
        next += BigInt(event.value.data.length);
        hash.update(event.value.data);
      } else if (event.case === "exited") {
        exitedStdoutBytes = event.value.stdoutBytes;
        status = event.value.status;
      }
    }
    const seconds = (performance.now() - startedAt) / 1000;
    console.log(`1 GiB through Exec: ${seconds.toFixed(1)} s, ${(1024 / seconds).toFixed(0)} MiB/s`);
    expect(status).toBe(ProcessStatus.COMPLETED);
    expect(next).toBe(BigInt(gibibyte));
    expect(exitedStdoutBytes).toBe(BigInt(gibibyte));
    expect(hash.digest("hex")).toBe(expectedSha256);
  }, 180_000);

  it("holds the command back for a slow caller instead of dropping or hoarding output", async () => {
    const size = 24 * 1024 * 1024 + 5;
    const expected = deterministicBytes(size);
    const received: Uint8Array[] = [];
    let receivedBytes = 0;
    let maxLead = 0;
    let maxRetained = 0;
    let processId = "";
    for await (const response of t.client.exec({ spec: { command: deterministicBytesCommand(size) } })) {
      const event = response.event;
      if (event.case === "started") processId = event.value.processId;
      if (event.case !== "output") continue;
      received.push(event.value.data);
      receivedBytes += event.value.data.length;
      // What the daemon has read from the command but this caller has not yet received, and what it retains.
      const managed = t.server.manager.get(processId);
      maxLead = Math.max(maxLead, managed.outputOffsets.stdout - receivedBytes);
      maxRetained = Math.max(maxRetained, managed.outputOffsets.stdout - managed.retainedFrom.stdout);
      // A slow caller: a pause every few chunks.
      if (received.length % 8 === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const all = Buffer.concat(received);
    expect(all.length).toBe(size);
    expect(all.equals(expected)).toBe(true);
    console.log(
      `slow Exec caller: daemon ran at most ${(maxLead / 1048576).toFixed(1)} MiB ahead, retained at most ${(maxRetained / 1048576).toFixed(2)} MiB`,
    );
    // Without backpressure the command would finish at once, 24 MiB ahead of this reader. With it,
    // the daemon stays within its buffer plus what HTTP/2 and the sockets hold in flight.
    expect(maxLead).toBeLessThan(capacityBytes + 8 * 1024 * 1024);
    // Memory stays bounded: at most the capacity and a read or two beyond it.
    expect(maxRetained).toBeLessThanOrEqual(capacityBytes + 256 * 1024);
  }, 120_000);
});
