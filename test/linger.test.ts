import { Code } from "@connectrpc/connect";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { ProcessStatus } from "../gen/sandbox/v1/sandbox_pb.js";
import { ExpiryQueue } from "../src/process/housekeeping/expiry-queue.js";
import { holdsFor, waitFor } from "./support/processes.js";
import { rpcError, waitForExit } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const lingerMs = 2000;
let t: TestServer;

beforeAll(async () => {
  t = await startTestServer({ lingerMs });
});

afterAll(async () => {
  await t?.close();
});

/** Whether the daemon answers NOT_FOUND for a process id (false while it has the record). */
async function gone(processId: string): Promise<boolean> {
  try {
    await t.client.getProcess({ processId });
    return false;
  } catch (error) {
    return (await rpcError(Promise.reject(error))).code === Code.NotFound;
  }
}

describe("exited records linger, then go", () => {
  it("removes each auto-cleaned record the linger time after its exit", async () => {
    const ids: string[] = [];
    for (const delay of ["0", "0.1", "0.2"]) {
      const started = await t.client.startProcess({ spec: { command: "sleep", args: [delay] } });
      ids.push(started.process!.processId);
    }
    for (const id of ids) await waitForExit(t.client, id);
    // Right after the exits every record is still there to be asked about.
    for (const id of ids)
      expect((await t.client.getProcess({ processId: id })).process?.status).toBe(ProcessStatus.COMPLETED);
    await waitFor(() => gone(ids[2]!), { timeoutMs: 5000, what: "the last record to go" });
    for (const id of ids) expect(await gone(id)).toBe(true);
  });

  it("an id cleaned up early and started again is not removed by the first record's linger", async () => {
    await t.client.startProcess({ spec: { command: "true", processId: "reused" } });
    await waitForExit(t.client, "reused");
    expect((await t.client.cleanupProcesses({})).removedCount).toBeGreaterThanOrEqual(1);
    await t.client.startProcess({ spec: { command: "sleep", args: ["30"], processId: "reused" } });
    // Past the first record's expiry: the running one with the same id is still there.
    await holdsFor(
      async () => (await t.client.getProcess({ processId: "reused" })).process?.status === ProcessStatus.RUNNING,
      {
        forMs: lingerMs + 500,
        intervalMs: 100,
        what: "the running record",
      },
    );
    await t.client.killProcess({ processId: "reused", signal: "SIGKILL" });
  });
});

describe("ExpiryQueue", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("expires entries in the order added, each its delay after it was added, with keys and sequences as given", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    const expired: string[] = [];
    const queue = new ExpiryQueue(50, (key, sequence) => expired.push(`${key}:${sequence}`));
    queue.add("a", 1);
    vi.advanceTimersByTime(20);
    queue.add("b", 2);
    queue.add("a", 3);
    vi.advanceTimersByTime(40);
    expect(expired).toEqual(["a:1"]);
    vi.advanceTimersByTime(9);
    expect(expired).toEqual(["a:1"]);
    vi.advanceTimersByTime(1);
    expect(expired).toEqual(["a:1", "b:2", "a:3"]);
    expect(queue.size).toBe(0);
  });

  it("clear() drops what is queued without expiring it", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    const expired: string[] = [];
    const queue = new ExpiryQueue(20, (key) => expired.push(key));
    queue.add("a", 1);
    queue.clear();
    vi.advanceTimersByTime(60);
    expect(expired).toEqual([]);
    queue.add("b", 2);
    vi.advanceTimersByTime(60);
    expect(expired).toEqual(["b"]);
  });

  it("waits out a delay longer than setTimeout takes without firing early or spinning", async () => {
    // Node runs a timeout past 2^31 - 1 ms after 1 ms, with a TimeoutOverflowWarning each time.
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on("warning", onWarning);
    try {
      const expired: string[] = [];
      const queue = new ExpiryQueue(3_000_000_000, (key) => expired.push(key));
      queue.add("a", 1);
      await holdsFor(() => expired.length === 0 && !warnings.includes("TimeoutOverflowWarning"), {
        forMs: 100,
        intervalMs: 5,
        what: "no expiry and no overflow warning",
      });
      queue.clear();
    } finally {
      process.off("warning", onWarning);
    }
  });
});
