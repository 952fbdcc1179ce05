import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "./support/processes.js";
import { collectExec, sleepMarker, type SandboxClient } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const mib = 1024 * 1024;

describe("a consumer that stops reading a huge stream", () => {
  let test: TestServer;
  const connection = (): SandboxClient => test.connect();
  beforeAll(async () => {
    test = await startTestServer({ outputCapacityBytes: 4 * mib });
  });
  afterAll(async () => {
    await test.close();
  });

  it("Exec: the command is paused, daemon memory stays flat, and everyone else is served", async () => {
    const slow = connection();
    const abort = new AbortController();
    // An endless producer: 10 GB and more if anyone read it.
    const stream = slow.exec({ spec: { command: "cat /dev/zero" } }, { signal: abort.signal })[Symbol.asyncIterator]();
    const first = await stream.next();
    expect(first.value?.event.case).toBe("started");
    const processId = first.value!.event.value!.processId as string;
    const managed = test.server.manager.get(processId);
    // Let the pipeline fill up (the client's window, the server's buffer, the pipe) until it stalls.
    let last = -1;
    let sameSince = Date.now();
    await waitFor(
      () => {
        const now = managed.outputOffsets.stdout;
        if (now !== last) [last, sameSince] = [now, Date.now()];
        return Date.now() - sameSince > 500;
      },
      { timeoutMs: 20_000, intervalMs: 50, what: "the producer to be paused" },
    );
    global.gc?.();
    const rssBefore = process.memoryUsage().rss;
    const producedBefore = managed.outputOffsets.stdout;

    // While it is stalled, others are served: on another connection and on the same one.
    const started = Date.now();
    for (let i = 0; i < 20; i++) {
      const other = await collectExec(i % 2 === 0 ? connection() : slow, { command: `echo ${i}` });
      expect(other.stdout.toString()).toBe(`${i}\n`);
    }
    const othersMs = Date.now() - started;
    await waitFor(() => Date.now() - started > 2000, { intervalMs: 100, what: "two seconds of stall" });

    const produced = managed.outputOffsets.stdout - producedBefore;
    const rssGrowth = process.memoryUsage().rss - rssBefore;
    console.log(
      `slow Exec consumer: ${(producedBefore / mib).toFixed(1)} MiB produced before the stall, ${(produced / mib).toFixed(1)} MiB during ` +
        `${((Date.now() - started) / 1000).toFixed(1)} s of it, RSS growth ${(rssGrowth / mib).toFixed(1)} MiB; 20 other execs in ${othersMs} ms`,
    );
    // Paused: at most a pipe's and a read's worth moved while nobody read.
    expect(produced).toBeLessThan(8 * mib);
    expect(rssGrowth).toBeLessThan(128 * mib);

    // Reading again resumes the command.
    for (let read = 0; read < 50; read++) await stream.next();
    await waitFor(() => managed.outputOffsets.stdout > producedBefore + produced, { what: "the command to resume" });
    abort.abort();
    await waitFor(() => managed.exit !== undefined, { what: "the cancelled Exec to be killed" });
  });

  it("StreamLogs of a background process: the process runs on, old output is dropped, memory stays flat", async () => {
    const { process: info } = await test.client.startProcess({ spec: { command: `cat /dev/zero # ${sleepMarker()}` } });
    const managed = test.server.manager.get(info!.processId);
    const slow = connection();
    const abort = new AbortController();
    const stream = slow
      .streamLogs({ processId: info!.processId, follow: true }, { signal: abort.signal })
      [Symbol.asyncIterator]();
    expect((await stream.next()).value?.event.case).toBe("process");
    await waitFor(() => managed.outputOffsets.stdout > 8 * mib, { what: "output to flow" });
    const rssBefore = process.memoryUsage().rss;
    const before = managed.outputOffsets.stdout;
    await waitFor(() => managed.outputOffsets.stdout > before + 256 * mib, {
      timeoutMs: 30_000,
      what: "256 MiB more output",
    });
    const rssGrowth = process.memoryUsage().rss - rssBefore;
    console.log(
      `slow StreamLogs consumer: ${((managed.outputOffsets.stdout - before) / mib).toFixed(0)} MiB produced unread, RSS growth ${(rssGrowth / mib).toFixed(1)} MiB`,
    );
    expect(rssGrowth).toBeLessThan(128 * mib);
    // The reader that comes back is told what it missed, then continues.
    let sawGap = false;
    for (let read = 0; read < 200 && !sawGap; read++) sawGap = (await stream.next()).value?.event.case === "gap";
    expect(sawGap).toBe(true);
    abort.abort();
    await test.client.killProcess({ processId: info!.processId, signal: "SIGKILL" });
  });
});
