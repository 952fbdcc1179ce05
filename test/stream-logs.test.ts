import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { OutputStream, type SendInputRequestSchema, type StreamLogsResponse } from "../gen/sandbox/v1/sandbox_pb.js";
import { waitFor } from "./support/processes.js";
import {
  Code,
  collectLogs,
  createUncompressedClient,
  deterministicBytes,
  joinStream,
  outputChunks,
  ProcessStatus,
  rpcError,
  waitForExit,
} from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

type LogsEvent = StreamLogsResponse["event"];

let t: TestServer;
/** Two more connections, as other clients would have, for the bulk tests (see createUncompressedClient). */
let fast: ReturnType<typeof createUncompressedClient>;
let other: ReturnType<typeof createUncompressedClient>;
const stdoutPart = deterministicBytes(300_000);
const stderrPart = deterministicBytes(100_000).reverse();
const megabyte = deterministicBytes(1024 * 1024);

beforeAll(async () => {
  t = await startTestServer();
  fast = createUncompressedClient(t.server.url);
  other = createUncompressedClient(t.server.url);
  writeFileSync(path.join(t.workspace, "out.bin"), stdoutPart);
  writeFileSync(path.join(t.workspace, "err.bin"), stderrPart);
  writeFileSync(path.join(t.workspace, "megabyte.bin"), megabyte);
});
afterAll(async () => {
  fast.close();
  other.close();
  await t.close();
});

/** Permits handed from one task to another: `next()` resolves once `grant()` was called once more than before. */
function createPacer(): { grant(): void; next(): Promise<void>; readonly granted: number } {
  let granted = 0;
  let taken = 0;
  let wake: (() => void) | undefined;
  return {
    grant() {
      granted++;
      wake?.();
    },
    async next() {
      while (taken >= granted) await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
      taken++;
    },
    get granted() {
      return granted;
    },
  };
}

/** Checks the guaranteed first and last events and returns the last. */
function expectFraming(events: readonly LogsEvent[], last: "exited" | "caughtUp"): LogsEvent {
  expect(events[0].case).toBe("process");
  expect(events.at(-1)?.case).toBe(last);
  expect(events.filter((event) => event.case === "process" || event.case === last)).toHaveLength(2);
  return events.at(-1)!;
}

describe("StreamLogs replay", () => {
  const expectedStdout = Buffer.concat([stdoutPart, stdoutPart]);
  const expectedStderr = Buffer.concat([stderrPart, stderrPart]);
  let processId: string;

  beforeAll(async () => {
    const { process } = await t.client.startProcess({
      // The pauses order the phases: the pipes are socket pairs whose buffers hold each write whole,
      // so without them the daemon could read the phases in any order.
      spec: {
        command: "cat out.bin; sleep 0.1; cat err.bin >&2; sleep 0.1; cat out.bin; sleep 0.1; cat err.bin >&2",
        autoCleanup: false,
      },
    });
    processId = process!.processId;
    const exit = await waitForExit(t.client, processId);
    expect(exit.stdoutBytes).toBe(BigInt(expectedStdout.length));
    expect(exit.stderrBytes).toBe(BigInt(expectedStderr.length));
  });

  it("from offsets 0 returns every byte of both streams with contiguous offsets, then the exit", async () => {
    const events = await collectLogs(t.client, { processId });
    const last = expectFraming(events, "exited");
    expect(last.case === "exited" && last.value.status).toBe(ProcessStatus.COMPLETED);
    const chunks = outputChunks(events);
    expect(joinStream(chunks, OutputStream.STDOUT).equals(expectedStdout)).toBe(true);
    expect(joinStream(chunks, OutputStream.STDERR).equals(expectedStderr)).toBe(true);
    expect(events.some((event) => event.case === "gap")).toBe(false);
  });

  it("from mid offsets returns exactly the bytes from there, with follow or without", async () => {
    const cases: Array<[number, number]> = [
      [1, 1],
      [299_999, 100_000],
      [300_000, 0],
      [345_678, 123_456],
      [expectedStdout.length - 1, expectedStderr.length],
      [expectedStdout.length, expectedStderr.length],
    ];
    for (const [stdoutOffset, stderrOffset] of cases) {
      for (const follow of [false, true]) {
        const events = await collectLogs(t.client, {
          processId,
          stdoutOffset: BigInt(stdoutOffset),
          stderrOffset: BigInt(stderrOffset),
          follow,
        });
        expectFraming(events, "exited");
        const chunks = outputChunks(events);
        const stdout = joinStream(chunks, OutputStream.STDOUT, BigInt(stdoutOffset));
        const stderr = joinStream(chunks, OutputStream.STDERR, BigInt(stderrOffset));
        expect(stdout.equals(expectedStdout.subarray(stdoutOffset))).toBe(true);
        expect(stderr.equals(expectedStderr.subarray(stderrOffset))).toBe(true);
      }
    }
  });

  it("keeps the order of arrival across the two streams", async () => {
    const events = await collectLogs(t.client, { processId });
    const chunks = outputChunks(events);
    const sequence = chunks.map((chunk) => `${chunk.stream}:${chunk.offset}+${chunk.data.length}`).join(" ");
    // stderr is written well after the first 300 000 stdout bytes, and the second stdout part well
    // after stderr: its first chunk comes after stdout's first and before stdout's last.
    const firstStderr = chunks.findIndex((chunk) => chunk.stream === OutputStream.STDERR);
    const lastStdout = chunks.map((chunk) => chunk.stream).lastIndexOf(OutputStream.STDOUT);
    expect(chunks[0].stream, sequence).toBe(OutputStream.STDOUT);
    expect(firstStderr, sequence).toBeGreaterThan(0);
    expect(firstStderr, sequence).toBeLessThan(lastStdout);
  });

  it("agrees with GetProcessLogs", async () => {
    const logs = await t.client.getProcessLogs({ processId });
    expect(Buffer.from(logs.stdout).equals(expectedStdout)).toBe(true);
    expect(Buffer.from(logs.stderr).equals(expectedStderr)).toBe(true);
    expect(logs.stdoutOffset).toBe(0n);
    expect(logs.process?.exit?.status).toBe(ProcessStatus.COMPLETED);
  });
});

describe("StreamLogs of a running process", () => {
  it("without follow is a snapshot that ends with caught_up at the offsets sent", async () => {
    const { process } = await t.client.startProcess({
      spec: { command: "printf ready; printf e >&2; exec sleep 1000.77", autoCleanup: false },
    });
    const processId = process!.processId;
    try {
      await waitFor(async () => {
        const info = (await t.client.getProcess({ processId })).process;
        return info?.stdoutBytes === 5n && info.stderrBytes === 1n;
      });
      const events = await collectLogs(t.client, { processId });
      const last = expectFraming(events, "caughtUp");
      expect(last.case === "caughtUp" && last.value).toMatchObject({ stdoutOffset: 5n, stderrOffset: 1n });
      expect(joinStream(outputChunks(events), OutputStream.STDOUT).toString()).toBe("ready");
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });

  it("with follow streams live output and ends with the exit; a reconnect resumes at the exact byte", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "cat", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    const controller = new AbortController();
    const follower = t.client
      .streamLogs({ processId, follow: true }, { signal: controller.signal })
      [Symbol.asyncIterator]();
    expect((await follower.next()).value?.event.case).toBe("process");

    async function* input(): AsyncGenerator<MessageInitShape<typeof SendInputRequestSchema>> {
      yield { input: { case: "open" as const, value: { processId } } };
      yield { input: { case: "data" as const, value: Buffer.from("first line\n") } };
      // Wait for the follower to see it before sending more.
      const seen = await follower.next();
      expect(seen.value?.event.case).toBe("output");
      expect(Buffer.from((seen.value?.event.value as { data: Uint8Array }).data).toString()).toBe("first line\n");
      // The first follower leaves; a new one resumes where it stopped.
      controller.abort();
      yield { input: { case: "data" as const, value: Buffer.from("second line\n") } };
      yield { input: { case: "close" as const, value: {} } };
    }
    for await (const _ of t.client.sendInput(input())) {
      // Acknowledged.
    }
    const resumed = await collectLogs(t.client, { processId, stdoutOffset: 11n, follow: true });
    expectFraming(resumed, "exited");
    expect(joinStream(outputChunks(resumed), OutputStream.STDOUT, 11n).toString()).toBe("second line\n");
  });

  it("several followers see identical bytes in the same order", async () => {
    // Paced well below what four followers in this one process can take, so none falls behind.
    const total = 8;
    const { process } = await t.client.startProcess({
      spec: {
        command: `for i in $(seq ${total}); do cat megabyte.bin; printf "$i" >&2; sleep 0.1; done`,
        autoCleanup: false,
      },
    });
    const processId = process!.processId;
    const followers = await Promise.all(
      [fast.client, fast.client, other.client, t.client].map((client) =>
        collectLogs(client, { processId, follow: true }),
      ),
    );
    const expected = Buffer.concat(Array.from({ length: total }, () => megabyte));
    const digests = followers.map((events) => {
      expectFraming(events, "exited");
      expect(events.some((event) => event.case === "gap")).toBe(false);
      const chunks = outputChunks(events);
      const stdout = joinStream(chunks, OutputStream.STDOUT);
      expect(stdout.equals(expected)).toBe(true);
      expect(joinStream(chunks, OutputStream.STDERR).toString()).toBe("12345678");
      // Same order across the two streams: where each stderr byte sits relative to stdout.
      const order = chunks
        .filter((chunk) => chunk.stream === OutputStream.STDERR)
        .map((chunk) => {
          const before = chunks.slice(0, chunks.indexOf(chunk)).filter((c) => c.stream === OutputStream.STDOUT);
          return before.reduce((sum, c) => sum + c.data.length, 0);
        });
      return createHash("sha256").update(stdout).update(JSON.stringify(order)).digest("hex");
    });
    expect(new Set(digests).size).toBe(1);
  });
});

describe("a stalled follower beside a fast one", () => {
  it("does not slow the fast one, and later learns exactly how many bytes it missed, then gets the rest", async () => {
    const pieces = 32;
    const expected = Buffer.concat(Array.from({ length: pieces }, () => megabyte));
    const { process } = await t.client.startProcess({
      // Paced by the fast follower, not the clock: each megabyte waits for a line of input, sent once the fast
      // follower has every byte so far, so it never falls behind however busy the machine is (a clock-paced
      // printer outran it on a loaded machine and it met a gap). 32 MiB is four times what the server retains.
      spec: {
        command: `for i in $(seq ${pieces}); do cat megabyte.bin; [ $i = ${pieces} ] || read line || exit 1; done`,
        stdin: true,
        autoCleanup: false,
      },
    });
    const processId = process!.processId;
    const pacer = createPacer();
    async function* input(): AsyncGenerator<MessageInitShape<typeof SendInputRequestSchema>> {
      yield { input: { case: "open" as const, value: { processId } } };
      // One line after each megabyte but the last; the process exits after that one on its own.
      for (let piece = 1; piece < pieces; piece++) {
        await pacer.next();
        yield { input: { case: "data" as const, value: Buffer.from("\n") } };
      }
    }
    const feeding = (async () => {
      for await (const _ of t.client.sendInput(input())) {
        // Acknowledged.
      }
    })();

    // The stalled follower, on a connection of its own, reads the first event and then nothing.
    const stalledController = new AbortController();
    const stalled = other.client
      .streamLogs({ processId, follow: true }, { signal: stalledController.signal })
      [Symbol.asyncIterator]();
    try {
      expect((await stalled.next()).value?.event.case).toBe("process");

      const fastEvents: LogsEvent[] = [];
      let fastBytes = 0;
      for await (const { event } of fast.client.streamLogs({ processId, follow: true })) {
        fastEvents.push(event);
        if (event.case !== "output") continue;
        fastBytes += event.value.data.length;
        while (pacer.granted < Math.floor(fastBytes / megabyte.length)) pacer.grant();
      }
      await feeding;
      const fastLast = expectFraming(fastEvents, "exited");
      expect(fastLast.case === "exited" && fastLast.value.status).toBe(ProcessStatus.COMPLETED);
      expect(fastEvents.some((event) => event.case === "gap")).toBe(false);
      expect(joinStream(outputChunks(fastEvents), OutputStream.STDOUT).equals(expected)).toBe(true);

      // Only now does the stalled follower read on.
      const rest: LogsEvent[] = [];
      for (let next = await stalled.next(); !next.done; next = await stalled.next()) rest.push(next.value.event);
      expect(rest.at(-1)?.case).toBe("exited");
      const gaps = rest.flatMap((event) => (event.case === "gap" ? [event.value] : []));
      expect(gaps).toHaveLength(1);
      let position = 0n;
      let received = 0;
      for (const event of rest) {
        if (event.case === "output") {
          expect(event.value.offset).toBe(position);
          const start = Number(event.value.offset);
          expect(Buffer.from(event.value.data).equals(expected.subarray(start, start + event.value.data.length))).toBe(
            true,
          );
          position += BigInt(event.value.data.length);
          received += event.value.data.length;
        } else if (event.case === "gap") {
          expect(event.value.stream).toBe(OutputStream.STDOUT);
          expect(event.value.offset).toBe(position);
          position += event.value.missedBytes;
        }
      }
      expect(position).toBe(BigInt(expected.length));
      expect(received + Number(gaps[0].missedBytes)).toBe(expected.length);
      // It missed most of it: far more than the server retains.
      expect(Number(gaps[0].missedBytes)).toBeGreaterThan(expected.length / 2);
      // The gap told the truth: what it skipped is exactly what the server no longer had.
      const logs = await t.client.getProcessLogs({ processId });
      expect(gaps[0].offset + gaps[0].missedBytes).toBeLessThanOrEqual(logs.stdoutOffset);
    } finally {
      stalledController.abort();
    }
  });
});

describe("exited records", () => {
  it("linger for a reconnecting client, then go with auto_cleanup; without it they stay", async () => {
    const lingering = await startTestServer({ lingerMs: 1500 });
    try {
      const auto = await lingering.client.startProcess({ spec: { command: "echo bye" } });
      const kept = await lingering.client.startProcess({ spec: { command: "echo kept", autoCleanup: false } });
      const autoId = auto.process!.processId;
      await waitForExit(lingering.client, autoId);
      // Still readable right after exit: the end and the exit event.
      const events = await collectLogs(lingering.client, { processId: autoId });
      expect(joinStream(outputChunks(events), OutputStream.STDOUT).toString()).toBe("bye\n");
      expect(events.at(-1)?.case).toBe("exited");
      await waitFor(
        async () =>
          (
            await rpcError(
              lingering.client.getProcess({ processId: autoId }).then(() => Promise.reject(new Error("still there"))),
            )
          ).code === Code.NotFound,
        {
          timeoutMs: 5000,
          intervalMs: 100,
          what: "the record to go",
        },
      );
      expect((await lingering.client.getProcess({ processId: kept.process!.processId })).process?.status).toBe(
        ProcessStatus.COMPLETED,
      );
    } finally {
      await lingering.close();
    }
  });
});
