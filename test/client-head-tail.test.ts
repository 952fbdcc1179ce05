import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, SandboxError, type Sandbox } from "../src/client/index.js";
import { waitFor } from "./support/processes.js";
import { startTestServer, type TestServer } from "./support/server.js";

/** What `seq 1 <last>` prints. */
function seqText(last: number): string {
  const lines: string[] = [];
  for (let n = 1; n <= last; n++) lines.push(`${n}\n`);
  return lines.join("");
}

let t: TestServer;
let sandbox: Sandbox;
beforeAll(async () => {
  t = await startTestServer();
  sandbox = await connect({ baseUrl: t.server.url, workspace: [t.workspace] });
});
afterAll(async () => {
  await sandbox.close();
  await t.close();
});

describe("the TypeScript client and the daemon's head and tail", () => {
  it("getProcessLogs and getLogs return the head, the tail and the one gap between, named", async () => {
    const expected = seqText(50_000);
    const process = await sandbox.startProcess("seq 1 50000", {
      autoCleanup: false,
      retention: { headBytes: 500, tailBytes: 5000 },
    });
    await waitFor(async () => (await sandbox.getProcess(process.id))?.exitCode !== undefined, { what: "the exit" });
    const logs = await sandbox.getProcessLogs(process.id);
    expect(logs.dropped).toHaveLength(1);
    const [gap] = logs.dropped;
    expect(gap.stream).toBe("stdout");
    expect(gap.offset).toBe(500);
    const tailFrom = gap.offset + gap.missedBytes;
    expect(expected.length - tailFrom).toBeLessThanOrEqual(5000);
    expect(logs.stdout).toBe(expected.slice(0, 500) + expected.slice(tailFrom));
    expect(logs.stderr).toBe("");
    expect(await process.getLogs()).toEqual({ stdout: logs.stdout, stderr: "", dropped: logs.dropped });
    // The record says the same, and what it keeps.
    const details = await sandbox.getProcess(process.id);
    expect(details?.exit?.dropped).toEqual(logs.dropped);
    expect(details?.retention).toEqual({ headBytes: 500, tailBytes: 5000 });
    expect(process.retention).toEqual({ headBytes: 500, tailBytes: 5000 });
  });

  it("has nothing dropped while everything fits", async () => {
    const process = await sandbox.startProcess("seq 1 100", { autoCleanup: false });
    await waitFor(async () => (await sandbox.getProcess(process.id))?.exitCode !== undefined, { what: "the exit" });
    expect(await sandbox.getProcessLogs(process.id)).toMatchObject({ stdout: seqText(100), dropped: [] });
  });

  it("exec() gets every byte, and its result says nothing was dropped; execStream's result says what it did not keep", async () => {
    const expected = seqText(1_500_000);
    expect(expected.length).toBeGreaterThan(8 * 1024 * 1024);
    const result = await sandbox.exec("seq 1 1500000", { timeout: 60_000 });
    expect(result.stdout.length).toBe(expected.length);
    expect(result.stdout === expected).toBe(true);
    expect(result.dropped).toEqual([]);
    let complete: { dropped: readonly unknown[]; stdout: string } | undefined;
    for await (const event of await sandbox.execStream("seq 1 1000", { maxRetainedBytes: 100 })) {
      if (event.type === "complete") complete = event.result;
    }
    // The result keeps the newest 100 bytes or fewer (whole chunks), and names the rest.
    const text = seqText(1000);
    expect(complete?.dropped).toEqual([
      { stream: "stdout", offset: 0, missedBytes: text.length - complete!.stdout.length },
    ]);
    expect(text.endsWith(complete!.stdout)).toBe(true);
  }, 90_000);

  it("refuses a retention above the daemon's cap, and sizes that are not byte counts before any call", async () => {
    const refused = await sandbox
      .startProcess("true", { retention: { headBytes: 4 * 1024 * 1024, tailBytes: 1 } })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(SandboxError);
    expect((refused as SandboxError).reason).toBe("RETENTION_ABOVE_LIMIT");
    await expect(sandbox.startProcess("true", { retention: { headBytes: -1 } })).rejects.toThrow(
      /retention.headBytes must be a whole number of bytes/,
    );
  });
});
