import { afterEach, describe, expect, it } from "vitest";
import { OutputStream } from "../gen/sandbox/v1/sandbox_pb.js";
import { waitFor } from "./support/processes.js";
import { collectExec, collectLogs, deterministicBytesCommand } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

describe("the output of exited records is bounded daemon-wide", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("past the budget the oldest exited output is dropped, reported as a gap; cleanup gives the rest back", async () => {
    const size = 256 * 1024;
    test = await startTestServer({ maxRetainedBytes: 600 * 1024 });
    const ids: string[] = [];
    for (let index = 0; index < 5; index++) {
      const started = await test.client.startProcess({ spec: { command: deterministicBytesCommand(size), autoCleanup: false } });
      ids.push(started.process!.processId);
      await waitFor(async () => (await test!.client.getProcess({ processId: ids[index] })).process?.exit !== undefined, { what: "the exit" });
    }
    const manager = test.server.manager;
    expect(manager.exitedOutputRetainedBytes).toBeLessThanOrEqual(600 * 1024);
    // The newest two are whole; the oldest were dropped and a reader is told exactly what it missed.
    for (const id of ids.slice(-2)) {
      expect((await test.client.getProcessLogs({ processId: id })).stdout.length).toBe(size);
    }
    const oldest = await test.client.getProcessLogs({ processId: ids[0] });
    expect(oldest.stdout.length).toBe(0);
    expect(oldest.stdoutOffset).toBe(BigInt(size));
    const events = await collectLogs(test.client, { processId: ids[0], follow: false });
    const gap = events.find((event) => event.case === "gap");
    expect(gap?.value).toMatchObject({ stream: OutputStream.STDOUT, offset: 0n, missedBytes: BigInt(size) });
    expect(events.at(-1)?.case).toBe("exited");

    expect((await test.client.cleanupProcesses({})).removedCount).toBe(5);
    expect(manager.exitedOutputRetainedBytes).toBe(0);
  });

  it("an Exec whose caller got everything keeps its record, not its output", async () => {
    test = await startTestServer();
    const result = await collectExec(test.client, { command: deterministicBytesCommand(100_000) });
    expect(result.stdout.length).toBe(100_000);
    const logs = await test.client.getProcessLogs({ processId: result.started.processId });
    expect(logs.process?.exit?.exitCode).toBe(0);
    expect(logs.stdout.length).toBe(0);
    expect(logs.stdoutOffset).toBe(100_000n);
    expect(test.server.manager.exitedOutputRetainedBytes).toBe(0);
  });
});
