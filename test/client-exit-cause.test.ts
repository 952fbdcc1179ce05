import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, exitCauses, type Process, type Sandbox } from "../src/client/index.js";
import { waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

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

describe("the TypeScript client says why a command ended", () => {
  it("lists every cause by its lower-case name", () => {
    expect(exitCauses).toEqual([
      "exited",
      "signaled",
      "killed_on_request",
      "timed_out",
      "out_of_memory",
      "daemon_shutdown",
      "start_failed",
      "unknown",
    ]);
  });

  it("exec()'s ExecResult (Cloudflare's shape) carries the cause; Together's { exitCode, output } stays exactly that", async () => {
    const result = await sandbox.exec("exit 4");
    expect({ exitCode: result.exitCode, cause: result.cause }).toEqual({ exitCode: 4, cause: "exited" });
    const timedOut = await sandbox.runCommand("sleep", [sleepMarker()], { timeoutMs: 100 });
    expect(timedOut.cause).toBe("timed_out");
  });

  it("a background process killed by a sibling's signal is signaled on its handle, its Process view and its wait()", async () => {
    const marker = sleepMarker();
    const handle = await sandbox.startProcess(`sleep ${marker}`);
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep" });
    await sandbox.exec(`kill -TERM ${sleepers(marker)[0]}`);
    const finished = await handle.wait();
    expect({ cause: finished.cause, signal: finished.signal, exitCode: finished.exitCode }).toEqual({
      cause: "signaled",
      signal: "SIGTERM",
      exitCode: 143,
    });
    expect(handle.cause).toBe("signaled");
    const view: Process | null = await sandbox.getProcess(handle.id);
    expect(view?.cause).toBe("signaled");
  });

  it("a failed start names its stage and errno", async () => {
    const finished = await (await sandbox.startProcess("no-such-program-client-cause", { args: ["x"] })).wait();
    expect(finished.exit).toMatchObject({ cause: "start_failed", startStage: "exec", errno: "ENOENT" });
  });
});
