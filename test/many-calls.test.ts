import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectExec } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

describe("many calls at once", () => {
  let test: TestServer;
  const warnings: string[] = [];
  const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
  beforeAll(async () => {
    test = await startTestServer();
    process.on("warning", onWarning);
  });
  afterAll(async () => {
    process.off("warning", onWarning);
    await test.close();
  });

  it("20 Execs and 15 followed StreamLogs side by side raise no MaxListenersExceededWarning", async () => {
    const ids = await Promise.all(
      Array.from(
        { length: 15 },
        async () => (await test.client.startProcess({ spec: { command: "sleep 0.5" } })).process!.processId,
      ),
    );
    const follows = ids.map(async (processId) => {
      for await (const _ of test.client.streamLogs({ processId, follow: true })) {
        // Drain to the exit.
      }
    });
    const execs = Array.from({ length: 20 }, () => collectExec(test.client, { command: "sleep 0.3" }));
    await Promise.all([...follows, ...execs]);
    // Warnings are emitted on the next tick.
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings.filter((warning) => warning.startsWith("MaxListenersExceededWarning"))).toEqual([]);
  });
});
