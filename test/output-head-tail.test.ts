import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutputStream, type OutputGap, type StreamLogsResponse } from "../gen/sandbox/v1/sandbox_pb.js";
import { expectReason } from "./support/errors.js";
import {
  Code,
  collectExec,
  collectLogs,
  createUncompressedClient,
  rpcError,
  streamError,
  waitForExit,
} from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const kib = 1024;
const mib = 1024 * kib;
/** The daemon's defaults: 8 MiB per process, a head of 64 KiB per stream, the tail the rest. */
const maxOutputBytes = 8 * mib;
const headBytes = 64 * kib;
const tailBytes = maxOutputBytes - 2 * headBytes;
/** The buffer's bookkeeping charge per chunk, and the least a chunk holds (smaller writes are merged). */
const chunkBookkeepingBytes = 64;
const minChunkBytes = 4 * kib;

/** What `seq 1 <last>` prints, computed here: the bytes to compare the daemon's with. */
function seqOutput(last: number): Buffer {
  const lines: string[] = [];
  for (let n = 1; n <= last; n++) lines.push(`${n}\n`);
  return Buffer.from(lines.join(""));
}

/** One stream's StreamLogs events from `from`, checked contiguous: the bytes and the gaps, in order. */
function replay(events: readonly StreamLogsResponse["event"][], stream: OutputStream, from = 0n) {
  let next = from;
  const parts: Uint8Array[] = [];
  const gaps: Array<[bigint, bigint]> = [];
  for (const event of events) {
    if ((event.case !== "output" && event.case !== "gap") || event.value.stream !== stream) continue;
    if (event.value.offset !== next) throw new Error(`event at ${event.value.offset}, expected ${next}`);
    if (event.case === "gap") {
      gaps.push([event.value.offset, event.value.missedBytes]);
      next += event.value.missedBytes;
    } else {
      parts.push(event.value.data);
      next += BigInt(event.value.data.length);
    }
  }
  return { bytes: Buffer.concat(parts), gaps, end: next };
}

const gap = (offset: number, missedBytes: number) => ({
  stream: OutputStream.STDOUT,
  offset: BigInt(offset),
  missedBytes: BigInt(missedBytes),
});
const plainGaps = (gaps: readonly OutputGap[]) =>
  gaps.map(({ stream, offset, missedBytes }) => ({ stream, offset, missedBytes }));

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

describe("a process's retained output: its head and its tail, one gap between", () => {
  // 6,500,000 lines of seq: some 50 MB.
  const last = 6_500_000;
  let expected: Buffer;
  let processId: string;
  let tailFrom: number;

  beforeAll(async () => {
    expected = seqOutput(last);
    expect(expected.length).toBeGreaterThan(50_000_000);
    const { process } = await t.client.startProcess({
      spec: { command: `echo first-err >&2; seq 1 ${last}; echo last-err >&2`, autoCleanup: false },
    });
    processId = process!.processId;
    const exit = await waitForExit(t.client, processId, 120_000);
    expect(exit.stdoutBytes).toBe(BigInt(expected.length));
  }, 180_000);

  it("GetProcessLogs returns the exact first 64 KiB, one explicit gap, and the exact last bytes", async () => {
    const logs = await bulk.client.getProcessLogs({ processId });
    tailFrom = Number(logs.stdoutOffset);
    // The tail is the last bytes to the byte, less the bookkeeping of each chunk it holds. How many
    // chunks depends on how the daemon's reads met seq's writes (a busy machine reads more, smaller
    // ones), but each holds at least minChunkBytes.
    const leastStored = Math.floor((tailBytes * minChunkBytes) / (minChunkBytes + chunkBookkeepingBytes));
    expect(logs.stdout.length).toBeLessThanOrEqual(tailBytes);
    expect(logs.stdout.length).toBeGreaterThan(leastStored - minChunkBytes);
    expect(tailFrom + logs.stdout.length).toBe(expected.length);
    expect(Buffer.from(logs.head!.stdout).equals(expected.subarray(0, headBytes))).toBe(true);
    expect(Buffer.from(logs.stdout).equals(expected.subarray(tailFrom))).toBe(true);
    expect(plainGaps(logs.head!.dropped)).toEqual([gap(headBytes, tailFrom - headBytes)]);
    // stderr printed little, all of it in its own head: no gap, whatever stdout printed between.
    expect(Buffer.from(logs.stderr).toString()).toBe("first-err\nlast-err\n");
    expect(logs.stderrOffset).toBe(0n);
    expect(logs.head!.stderr.length).toBe(0);
    // The record says the same, and what it retains.
    expect(plainGaps(logs.process!.exit!.dropped)).toEqual([gap(headBytes, tailFrom - headBytes)]);
    expect(logs.process!.retention).toMatchObject({ headBytes: BigInt(headBytes), tailBytes: BigInt(tailBytes) });
  });

  it("StreamLogs from 0 gives the head, one gap event, then the tail, and the exit says what was dropped", async () => {
    const events = await collectLogs(bulk.client, { processId });
    const stdout = replay(events, OutputStream.STDOUT);
    expect(stdout.gaps).toEqual([[BigInt(headBytes), BigInt(tailFrom - headBytes)]]);
    expect(stdout.end).toBe(BigInt(expected.length));
    expect(stdout.bytes.equals(Buffer.concat([expected.subarray(0, headBytes), expected.subarray(tailFrom)]))).toBe(
      true,
    );
    expect(replay(events, OutputStream.STDERR).bytes.toString()).toBe("first-err\nlast-err\n");
    const exited = events.at(-1);
    expect(exited?.case).toBe("exited");
    expect(exited?.case === "exited" && plainGaps(exited.value.dropped)).toEqual([
      gap(headBytes, tailFrom - headBytes),
    ]);
  });

  it("StreamLogs from an offset inside the gap says what it missed up to the tail, then continues with the tail", async () => {
    const from = 20_000_000;
    expect(from).toBeGreaterThan(headBytes);
    expect(from).toBeLessThan(tailFrom);
    const events = await collectLogs(bulk.client, { processId, stdoutOffset: BigInt(from), follow: true });
    expect(events[0].case).toBe("process");
    const firstStdout = events.find((event) => event.case === "gap" || event.case === "output");
    expect(firstStdout).toEqual({
      case: "gap",
      value: expect.objectContaining(gap(from, tailFrom - from)),
    });
    const stdout = replay(events, OutputStream.STDOUT, BigInt(from));
    expect(stdout.gaps).toEqual([[BigInt(from), BigInt(tailFrom - from)]]);
    expect(stdout.bytes.equals(expected.subarray(tailFrom))).toBe(true);
    expect(events.at(-1)?.case).toBe("exited");
  });

  it("StreamLogs from an offset inside the head gives the rest of the head, the gap, then the tail", async () => {
    const from = 1000;
    const events = await collectLogs(bulk.client, { processId, stdoutOffset: BigInt(from), stderrOffset: 10n });
    const stdout = replay(events, OutputStream.STDOUT, BigInt(from));
    expect(stdout.gaps).toEqual([[BigInt(headBytes), BigInt(tailFrom - headBytes)]]);
    expect(stdout.bytes.equals(Buffer.concat([expected.subarray(from, headBytes), expected.subarray(tailFrom)]))).toBe(
      true,
    );
    expect(replay(events, OutputStream.STDERR, 10n).bytes.toString()).toBe("last-err\n");
  });
});

describe("retention asked per request", () => {
  it("keeps the head and tail sizes a request asks for, exact around one gap", async () => {
    const expected = seqOutput(100_000);
    const { process } = await t.client.startProcess({
      spec: { command: "seq 1 100000", autoCleanup: false, retention: { headBytes: 1000n, tailBytes: 20_000n } },
    });
    const processId = process!.processId;
    expect(process!.retention).toMatchObject({ headBytes: 1000n, tailBytes: 20_000n });
    await waitForExit(t.client, processId, 30_000);
    const logs = await t.client.getProcessLogs({ processId });
    const from = Number(logs.stdoutOffset);
    expect(Buffer.from(logs.head!.stdout).equals(expected.subarray(0, 1000))).toBe(true);
    expect(logs.stdout.length).toBeLessThanOrEqual(20_000);
    expect(logs.stdout.length).toBeGreaterThan(20_000 - chunkBookkeepingBytes * 16);
    expect(Buffer.from(logs.stdout).equals(expected.subarray(from))).toBe(true);
    expect(from + logs.stdout.length).toBe(expected.length);
    expect(plainGaps(logs.head!.dropped)).toEqual([gap(1000, from - 1000)]);
  });

  it("fills in an unset size from the daemon's defaults: an unset tail is what the cap leaves after two heads", async () => {
    const { process } = await t.client.startProcess({
      spec: { command: "true", retention: { headBytes: BigInt(mib) } },
    });
    expect(process!.retention).toMatchObject({ headBytes: BigInt(mib), tailBytes: BigInt(6 * mib) });
    const none = await t.client.startProcess({ spec: { command: "true", retention: { tailBytes: 0n } } });
    expect(none.process!.retention).toMatchObject({ headBytes: BigInt(headBytes), tailBytes: 0n });
  });

  it("keeps everything, without a gap, while the output fits", async () => {
    const expected = seqOutput(1000);
    const { process } = await t.client.startProcess({
      spec: { command: "seq 1 1000", autoCleanup: false, retention: { headBytes: 100n, tailBytes: 10_000n } },
    });
    await waitForExit(t.client, process!.processId);
    const logs = await t.client.getProcessLogs({ processId: process!.processId });
    expect(logs.stdoutOffset).toBe(0n);
    expect(Buffer.from(logs.stdout).equals(expected)).toBe(true);
    expect(logs.head!.stdout.length).toBe(0);
    expect(logs.head!.dropped).toEqual([]);
    expect(logs.process!.exit!.dropped).toEqual([]);
  });

  it("refuses a retention above the daemon's cap with INVALID_ARGUMENT naming max-output-bytes", async () => {
    const refusal = (field: string) => ({
      code: Code.InvalidArgument,
      reason: "RETENTION_ABOVE_LIMIT",
      metadata: { field, limit: "max-output-bytes", value: String(maxOutputBytes) },
      message: /above the daemon's max-output-bytes of 8388608/,
    });
    expectReason(
      await rpcError(
        t.client.startProcess({ spec: { command: "true", retention: { headBytes: BigInt(4 * mib), tailBytes: 1n } } }),
      ),
      refusal("retention"),
    );
    expectReason(
      await streamError(t.client.exec({ spec: { command: "true", retention: { tailBytes: BigInt(8 * mib + 1) } } })),
      refusal("retention.tail_bytes"),
    );
    expectReason(
      await rpcError(t.client.startProcess({ spec: { command: "true", retention: { headBytes: 2n ** 63n } } })),
      refusal("retention.head_bytes"),
    );
  });
});

describe("Exec and the head and tail", () => {
  it("streams every byte, so its exit says nothing was dropped, while the record kept head and tail", async () => {
    const expected = seqOutput(2_000_000);
    expect(expected.length).toBeGreaterThan(maxOutputBytes);
    const result = await collectExec(bulk.client, { command: "seq 1 2000000", autoCleanup: false });
    expect(result.stdout.equals(expected)).toBe(true);
    expect(result.exited.dropped).toEqual([]);
  }, 60_000);
});

describe("the daemon's default head", () => {
  it("comes from its options (--output-head-bytes), the tail is the rest of --max-output-bytes", async () => {
    const small = await startTestServer({ outputCapacityBytes: mib, outputHeadBytes: 4096 });
    try {
      const expected = seqOutput(300_000);
      const { process } = await small.client.startProcess({ spec: { command: "seq 1 300000", autoCleanup: false } });
      expect(process!.retention).toMatchObject({ headBytes: 4096n, tailBytes: BigInt(mib - 8192) });
      await waitForExit(small.client, process!.processId, 30_000);
      const logs = await small.client.getProcessLogs({ processId: process!.processId });
      const from = Number(logs.stdoutOffset);
      expect(Buffer.from(logs.head!.stdout).equals(expected.subarray(0, 4096))).toBe(true);
      expect(Buffer.from(logs.stdout).equals(expected.subarray(from))).toBe(true);
      expect(plainGaps(logs.head!.dropped)).toEqual([gap(4096, from - 4096)]);
    } finally {
      await small.close();
    }
  });
});
