import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectExec } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;

beforeAll(async () => {
  t = await startTestServer({ maxProcesses: 200 });
});

afterAll(async () => {
  await t?.close();
});

/** Exit code of a child_process child: Node's own reaping, beside the addon's in the same process. */
function childProcessExit(code: number): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/sh", ["-c", `sleep 0.05; exit ${code}`], { stdio: "ignore" });
    child.once("error", reject);
    child.once("exit", (exitCode) => resolve(exitCode));
  });
}

describe("exits of the addon's children", () => {
  it("are each told once with their own code while background processes wait and child_process children exit beside them", async () => {
    // Waiting children make the exited ones a few among many; child_process children are reaped by
    // Node itself, and the daemon must neither take their status nor lose its own to them.
    // One call first: a connection gets its full share of streams once it has made one (flood protection).
    await t.client.listProcesses({});
    const background = await Promise.all(
      Array.from({ length: 40 }, () => t.client.startProcess({ spec: { command: "sleep", args: ["30"] } })),
    );
    try {
      const results = await Promise.all([
        ...Array.from({ length: 30 }, (_, index) =>
          collectExec(t.client, { command: `sleep 0.0${index % 9}; exit ${index % 7}` }).then(
            (result) => ["exec", index % 7, result.exited.exitCode] as const,
          ),
        ),
        ...Array.from({ length: 30 }, (_, index) =>
          childProcessExit(10 + (index % 5)).then((code) => ["child_process", 10 + (index % 5), code] as const),
        ),
      ]);
      for (const [kind, expected, actual] of results) expect({ kind, code: actual }).toEqual({ kind, code: expected });
    } finally {
      await t.client.killAllProcesses({ signal: "SIGKILL" });
    }
    expect(background).toHaveLength(40);
  });
});
