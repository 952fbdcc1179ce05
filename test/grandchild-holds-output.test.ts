import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { processesWithMarker, waitFor } from "./support/processes.js";
import {
  collectExec,
  deterministicBytes,
  deterministicBytesCommand,
  ProcessStatus,
  sleepMarker,
  waitForExit,
} from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

describe("a background child that keeps stdout open", () => {
  it("does not hold back the exit: reported within a second of the leader exiting, with all output", async () => {
    const marker = sleepMarker(30);
    const startedAt = performance.now();
    let startedEventAt = 0;
    const events = [];
    for await (const response of t.client.exec({ spec: { command: `sh -c 'sleep ${marker} & echo hi'` } })) {
      if (response.event.case === "started") startedEventAt = performance.now();
      events.push(response.event);
    }
    const elapsedMs = performance.now() - startedEventAt;
    const exited = events.at(-1);
    if (exited?.case !== "exited") throw new Error("no exited event");
    const output = Buffer.concat(events.flatMap((event) => (event.case === "output" ? [event.value.data] : [])));
    expect(output.toString()).toBe("hi\n");
    expect(exited.value.status).toBe(ProcessStatus.COMPLETED);
    expect(exited.value.exitCode).toBe(0);
    expect(exited.value.stdoutBytes).toBe(3n);
    // The leader exits at once; the issue allows a second from there.
    expect(elapsedMs).toBeLessThan(1000);
    expect(performance.now() - startedAt).toBeLessThan(2000);
    // The sleep that held the pipe went with its group: nothing runs unaccounted.
    await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 2000, what: "the sleep to be gone" });
  });

  it("still delivers every byte of a leader that printed a lot just before exiting", async () => {
    const marker = sleepMarker(30);
    const size = 3 * 1024 * 1024 + 17;
    const result = await collectExec(t.client, { command: `sleep ${marker} & ${deterministicBytesCommand(size)}` });
    expect(result.exited.status).toBe(ProcessStatus.COMPLETED);
    expect(result.stdout.equals(deterministicBytes(size))).toBe(true);
    expect(result.exited.stdoutBytes).toBe(BigInt(size));
    await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 2000 });
  });

  it("works the same for a background process followed with StreamLogs", async () => {
    const marker = sleepMarker(30);
    const { process } = await t.client.startProcess({
      spec: { command: `sleep ${marker} & echo bye >&2`, autoCleanup: false },
    });
    const exit = await waitForExit(t.client, process!.processId, 2000);
    expect(exit.status).toBe(ProcessStatus.COMPLETED);
    expect(exit.stderrBytes).toBe(4n);
    const logs = await t.client.getProcessLogs({ processId: process!.processId });
    expect(Buffer.from(logs.stderr).toString()).toBe("bye\n");
  });
});
