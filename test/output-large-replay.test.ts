import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutputStream } from "../gen/sandbox/v1/sandbox_pb.js";
import {
  createUncompressedClient,
  deterministicBytesCommand,
  deterministicBytesSha256,
  ProcessStatus,
  waitForExit,
} from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const gibibyte = 1024 * 1024 * 1024;

let t: TestServer;
let bulk: ReturnType<typeof createUncompressedClient>;
let expectedSha256: string;
beforeAll(async () => {
  // Computed before the server runs: hashing a gibibyte blocks this process for a few seconds.
  expectedSha256 = deterministicBytesSha256(gibibyte);
  // Room for all of it, so a replay after the exit has every byte to give.
  t = await startTestServer({ outputCapacityBytes: gibibyte + 64 * 1024 * 1024 });
  bulk = createUncompressedClient(t.server.url);
}, 60_000);
afterAll(async () => {
  bulk.close();
  await t.close();
});

describe("StreamLogs replay", () => {
  it("replays 1 GiB of binary output of an exited background process byte-exact (sha256)", async () => {
    const startedAt = performance.now();
    const { process } = await t.client.startProcess({
      spec: { command: deterministicBytesCommand(gibibyte), autoCleanup: false },
    });
    const processId = process!.processId;
    const exit = await waitForExit(t.client, processId, 120_000);
    const producedAt = performance.now();
    expect(exit.status).toBe(ProcessStatus.COMPLETED);
    expect(exit.stdoutBytes).toBe(BigInt(gibibyte));

    const hash = createHash("sha256");
    let next = 0n;
    const cases = new Set<string>();
    for await (const response of bulk.client.streamLogs({ processId })) {
      const event = response.event;
      cases.add(event.case ?? "none");
      if (event.case !== "output") continue;
      expect(event.value.stream).toBe(OutputStream.STDOUT);
      if (event.value.offset !== next) throw new Error(`chunk at ${event.value.offset}, expected ${next}`);
      next += BigInt(event.value.data.length);
      hash.update(event.value.data);
    }
    const replayedAt = performance.now();
    console.log(
      `1 GiB through StreamLogs replay: produced in ${((producedAt - startedAt) / 1000).toFixed(1)} s, ` +
        `replayed in ${((replayedAt - producedAt) / 1000).toFixed(1)} s (${(1024 / ((replayedAt - producedAt) / 1000)).toFixed(0)} MiB/s)`,
    );
    expect([...cases]).toEqual(["process", "output", "exited"]);
    expect(next).toBe(BigInt(gibibyte));
    expect(hash.digest("hex")).toBe(expectedSha256);
  }, 180_000);
});
