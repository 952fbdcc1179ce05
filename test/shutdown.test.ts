import { describe, expect, it } from "vitest";
import { groupMembers, processesWithMarker, waitFor } from "./support/processes.js";
import { Code, rpcError, sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer } from "./support/server.js";

describe("graceful shutdown", () => {
  it("ends open streams with UNAVAILABLE, kills every process group it started and leaves no orphans", async () => {
    const t = await startTestServer();
    const marker = sleepMarker();
    try {
      // An Exec stream, a background process followed by StreamLogs, a PTY process and one deaf to SIGTERM.
      const exec = t.client
        .exec({ spec: { command: `sh -c 'sleep ${marker} & sleep ${marker}'` } })
        [Symbol.asyncIterator]();
      const started = await exec.next();
      if (started.done || started.value.event.case !== "started") throw new Error("no started event");
      const background = await t.client.startProcess({ spec: { command: `sleep ${marker} & sleep ${marker}; wait` } });
      const logs = t.client
        .streamLogs({ processId: background.process!.processId, follow: true })
        [Symbol.asyncIterator]();
      expect((await logs.next()).value?.event.case).toBe("process");
      const pty = await t.client.startProcess({ spec: { command: `sleep ${marker}`, pty: {} } });
      const deaf = await t.client.startProcess({ spec: { command: `trap '' TERM; sleep ${marker}; wait` } });
      await waitFor(() => sleepers(marker).length === 6, { what: "all six sleeps to run" });
      const groups = [started.value.event.value.pid, background.process!.pid, pty.process!.pid, deaf.process!.pid];

      const closedAt = performance.now();
      const closing = t.server.close(500);
      const execError = await rpcError(exec.next());
      expect(Code[execError.code]).toBe(Code[Code.Unavailable]);
      expect(execError.rawMessage).toBe("the daemon is shutting down");
      const logsError = await rpcError(logs.next());
      expect(Code[logsError.code]).toBe(Code[Code.Unavailable]);
      await closing;
      // Within a few seconds, including the SIGKILL of the group that ignores SIGTERM.
      expect(performance.now() - closedAt).toBeLessThan(5000);
      expect(processesWithMarker(marker)).toEqual([]);
      for (const pgid of groups) expect(groupMembers(pgid)).toEqual([]);
      // No new calls once it is down.
      const after = await rpcError(t.client.getProcess({ processId: "anything" }));
      expect(Code[after.code]).toBe(Code[Code.Unavailable]);
    } finally {
      await t.close();
      await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 3000, what: "no orphans" });
    }
  });

  it("refuses new processes while shutting down", async () => {
    const t = await startTestServer();
    const marker = sleepMarker();
    try {
      const deaf = await t.client.startProcess({ spec: { command: `trap '' TERM; sleep ${marker}; wait` } });
      await waitFor(() => sleepers(marker).length === 1);
      // The grace period keeps the daemon in its shutdown for a while: calls made meanwhile are refused.
      const closing = t.server.close(1500);
      const refused = await rpcError(t.client.startProcess({ spec: { command: "true" } }));
      expect([Code[Code.Unavailable]]).toContain(Code[refused.code]);
      await closing;
      expect(groupMembers(deaf.process!.pid)).toEqual([]);
    } finally {
      await t.close();
    }
  });
});
