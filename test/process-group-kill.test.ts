import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { groupMembers, isAlive, processesWithMarker, waitFor } from "./support/processes.js";
import { collectExec, ProcessStatus, rpcError, Code, sleepMarker, sleepers, waitForExit } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

/** Starts `sh -c 'sleep M & sleep M'` in the background and waits until both sleeps run. */
async function startTwoSleeps(options: { sessionId?: string; prefix?: string } = {}) {
  const marker = sleepMarker();
  const command = `${options.prefix ?? ""}sh -c 'sleep ${marker} & sleep ${marker}'`;
  const { process } = await t.client.startProcess({
    spec: { command, sessionId: options.sessionId, autoCleanup: false },
  });
  expect(process?.status).toBe(ProcessStatus.RUNNING);
  const pid = process!.pid;
  await waitFor(() => sleepers(marker).length === 2, { what: "both sleeps to run" });
  for (const sleeper of sleepers(marker)) expect(groupMembers(pid)).toContain(sleeper);
  return { processId: process!.processId, pid, marker };
}

describe("KillProcess", () => {
  it("kills the whole process group with SIGTERM by default: nothing is left in /proc", async () => {
    const { processId, pid, marker } = await startTwoSleeps();
    const { process } = await t.client.killProcess({ processId });
    expect(process?.processId).toBe(processId);
    const exit = await waitForExit(t.client, processId);
    expect(exit.status).toBe(ProcessStatus.KILLED);
    expect(exit.signal).toBe("SIGTERM");
    expect(exit.killed).toBe(true);
    expect(exit.timedOut).toBe(false);
    await waitFor(() => processesWithMarker(marker).length === 0 && groupMembers(pid).length === 0, {
      timeoutMs: 2000,
      what: "the group to be gone",
    });
  });

  it("sends the signal asked for, by name, short name or number", async () => {
    for (const [signal, expected] of [
      ["SIGINT", "SIGINT"],
      ["hup", "SIGHUP"],
      ["9", "SIGKILL"],
    ]) {
      const marker = sleepMarker();
      const { process } = await t.client.startProcess({
        spec: { command: "sleep", args: [marker], autoCleanup: false },
      });
      await t.client.killProcess({ processId: process!.processId, signal });
      const exit = await waitForExit(t.client, process!.processId);
      expect(exit.signal).toBe(expected);
      expect(exit.status).toBe(ProcessStatus.KILLED);
      await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 2000 });
    }
  });

  it("escalates to SIGKILL after the grace period when SIGTERM is ignored", async () => {
    const marker = sleepMarker();
    // The trap makes the shell and the sleep it starts (ignored signals are inherited) deaf to SIGTERM.
    const { process } = await t.client.startProcess({
      spec: { command: `trap '' TERM; sleep ${marker} & sleep ${marker}; wait`, autoCleanup: false },
    });
    const processId = process!.processId;
    await waitFor(() => sleepers(marker).length === 2, { what: "both sleeps to run" });
    await t.client.killProcess({ processId, gracePeriodMs: 300 });
    const exit = await waitForExit(t.client, processId);
    // Had SIGTERM ended it, the signal would read SIGTERM.
    expect(exit.signal).toBe("SIGKILL");
    expect(exit.killed).toBe(true);
    await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 2000, what: "the group to be gone" });
  });

  it("on an exited process is harmless and returns the record", async () => {
    const done = await collectExec(t.client, { command: "true", autoCleanup: false });
    const { process } = await t.client.killProcess({ processId: done.started.processId });
    expect(process?.status).toBe(ProcessStatus.COMPLETED);
    expect(process?.exit?.killed).toBe(false);
  });
});

describe("KillAllProcesses", () => {
  it("kills every live process of a session, counts them and leaves other sessions alone", async () => {
    const inSession = await Promise.all([1, 2, 3].map(() => startTwoSleeps({ sessionId: "kill-all" })));
    const other = await startTwoSleeps({ sessionId: "bystander" });
    const { killedCount } = await t.client.killAllProcesses({ sessionId: "kill-all" });
    expect(killedCount).toBe(3);
    for (const { processId, marker, pid } of inSession) {
      expect((await waitForExit(t.client, processId)).status).toBe(ProcessStatus.KILLED);
      await waitFor(() => processesWithMarker(marker).length === 0 && groupMembers(pid).length === 0, {
        timeoutMs: 2000,
      });
    }
    expect(sleepers(other.marker)).toHaveLength(2);
    expect(isAlive(other.pid)).toBe(true);
    // Already-exited processes are not counted again.
    expect((await t.client.killAllProcesses({ sessionId: "kill-all" })).killedCount).toBe(0);
    const all = await t.client.killAllProcesses({ signal: "SIGKILL" });
    expect(all.killedCount).toBeGreaterThanOrEqual(1);
    await waitFor(() => processesWithMarker(other.marker).length === 0, { timeoutMs: 2000 });
  });
});

describe("CleanupProcesses", () => {
  it("removes exited records at once, counts them and keeps running ones", async () => {
    const exitedIds: string[] = [];
    for (const command of ["true", "exit 3"]) {
      const done = await collectExec(t.client, { command, sessionId: "cleanup", autoCleanup: false });
      exitedIds.push(done.started.processId);
    }
    const running = await startTwoSleeps({ sessionId: "cleanup" });
    const before = await t.client.listProcesses({ sessionId: "cleanup" });
    expect(before.processes.map((info) => info.processId).sort()).toEqual([...exitedIds, running.processId].sort());

    const { removedCount } = await t.client.cleanupProcesses({ sessionId: "cleanup" });
    expect(removedCount).toBe(2);
    for (const processId of exitedIds) {
      expect(Code[(await rpcError(t.client.getProcess({ processId }))).code]).toBe(Code[Code.NotFound]);
    }
    const after = await t.client.listProcesses({ sessionId: "cleanup" });
    expect(after.processes.map((info) => info.processId)).toEqual([running.processId]);
    expect(sleepers(running.marker)).toHaveLength(2);

    await t.client.killProcess({ processId: running.processId, signal: "SIGKILL" });
    await waitForExit(t.client, running.processId);
    expect((await t.client.cleanupProcesses({ sessionId: "cleanup" })).removedCount).toBe(1);
  });
});

describe("ListProcesses", () => {
  it("filters by session and status, oldest first", async () => {
    const done = await collectExec(t.client, { command: "exit 1", sessionId: "listing", autoCleanup: false });
    const running = await startTwoSleeps({ sessionId: "listing" });
    try {
      const all = await t.client.listProcesses({ sessionId: "listing" });
      expect(all.processes.map((info) => info.processId)).toEqual([done.started.processId, running.processId]);
      const live = await t.client.listProcesses({ sessionId: "listing", statuses: [ProcessStatus.RUNNING] });
      expect(live.processes.map((info) => info.processId)).toEqual([running.processId]);
      const ended = await t.client.listProcesses({
        sessionId: "listing",
        statuses: [ProcessStatus.FAILED, ProcessStatus.KILLED],
      });
      expect(ended.processes.map((info) => [info.processId, info.exit?.exitCode])).toEqual([
        [done.started.processId, 1],
      ]);
      const invalid = await rpcError(t.client.listProcesses({ statuses: [ProcessStatus.UNSPECIFIED] }));
      expect(Code[invalid.code]).toBe(Code[Code.InvalidArgument]);
    } finally {
      await t.client.killProcess({ processId: running.processId, signal: "SIGKILL" });
    }
  });
});
