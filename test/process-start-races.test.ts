import { afterAll, describe, expect, it, vi } from "vitest";
import { ProcessError, type ProcessManager } from "../src/process/index.js";
import { groupMembers, isAlive, processesWithMarker, waitFor } from "./support/processes.js";
import { startTestManager, type TestManager } from "./support/server.js";

const managers: TestManager[] = [];
afterAll(async () => {
  await Promise.all(managers.map((started) => started.close()));
});

async function newManager(
  options: { maxProcesses?: number; outputCapacityBytes?: number } = {},
): Promise<ProcessManager> {
  const started = await startTestManager(options);
  managers.push(started);
  return started.manager;
}

function marker(): string {
  return `${9000 + Math.floor(Math.random() * 999)}.${Date.now() % 100000}`;
}

/**
 * The record of `id` while its spawn is under way: a window of a few microtasks and one tick, too
 * short for a timer-based poll, so this polls a microtask at a time (bounded).
 */
async function startingRecord(manager: ProcessManager, id: string) {
  for (let turn = 0; turn < 10_000; turn++) {
    const managed = manager.list().find((candidate) => candidate.id === id);
    if (managed !== undefined) {
      expect(managed.status).toBe("starting");
      return managed;
    }
    await Promise.resolve();
  }
  throw new Error(`${id} never appeared`);
}

describe("a process killed while it is starting", () => {
  it("is killed as soon as it runs, and KillAll counts it", async () => {
    const manager = await newManager();
    const seconds = marker();
    const started = manager.start({
      command: "sleep",
      args: [seconds],
      processId: "starting-kill",
      autoCleanup: false,
    });
    const record = await startingRecord(manager, "starting-kill");
    expect(record.kill("SIGTERM", 100)).toBe(true);
    expect(manager.killAll({ gracePeriodMs: 100 })).toBe(1);
    const managed = await started;
    const exit = await managed.exited;
    expect(exit).toMatchObject({ status: "killed", signal: "SIGTERM", killed: true });
    expect(processesWithMarker(seconds)).toEqual([]);
  });

  it("does not hold shutdown back, and nothing it started survives", async () => {
    const manager = await newManager();
    const seconds = marker();
    const started = manager.start({ command: "sleep", args: [seconds], processId: "starting-shutdown" });
    await startingRecord(manager, "starting-shutdown");
    await manager.shutdown(100);
    const managed = await started;
    expect(managed.exit?.status).toBe("killed");
    expect(processesWithMarker(seconds)).toEqual([]);
  });

  it("is refused, not spawned, when shutdown begins while its working directory resolves", async () => {
    const manager = await newManager();
    const seconds = marker();
    const started = manager.start({ command: "sleep", args: [seconds] });
    await manager.shutdown(100);
    await expect(started).rejects.toMatchObject({ reason: "SHUTTING_DOWN" });
    expect(processesWithMarker(seconds)).toEqual([]);
  });
});

describe("maxProcesses", () => {
  it("holds against concurrent starts", async () => {
    const manager = await newManager({ maxProcesses: 2 });
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => manager.start({ command: "sleep 30" })));
    expect(results.filter((result) => result.status === "fulfilled")).toHaveLength(2);
    for (const result of results) {
      if (result.status === "rejected") {
        expect(result.reason).toBeInstanceOf(ProcessError);
        expect((result.reason as ProcessError).reason).toBe("LIMIT_EXCEEDED");
        expect((result.reason as ProcessError).metadata).toEqual({ limit: "max-processes", value: "2" });
      }
    }
    expect(manager.liveProcessCount).toBe(2);
    manager.killAll({ signal: "SIGKILL" });
  });
});

describe("after the leader exits", () => {
  it("kills its group once and never signals it again while the output drains", async () => {
    // A reader that does not read holds a terminal's output back (paused) after the leader exited;
    // on pipes Node resumes the output at the exit. The pause comes with the daemon's first read past
    // the 1 KiB capacity: the second half must be written after it, so the command gives a loaded
    // machine half a second to read the first (one read of both halves would leave nothing held).
    const manager = await newManager({ outputCapacityBytes: 1024 });
    const { process: managed, reader } = await manager.startPinned({
      command: "head -c 2048 /dev/zero | tr '\\0' a; sleep 0.5; head -c 2048 /dev/zero | tr '\\0' b; exit 3",
      pty: { cols: 80, rows: 24 },
      timeoutMs: 1500,
      autoCleanup: false,
    });
    const pid = managed.pid;
    const kill = vi.spyOn(process, "kill");
    try {
      await waitFor(() => !isAlive(pid) && groupMembers(pid).length === 0, { what: "the leader to exit" });
      expect(managed.exit).toBeUndefined();
      expect(managed.kill("SIGTERM")).toBe(false);
      // Past the timeout while the output is held: a timer still armed would signal a group id
      // that may belong to an unrelated process by now.
      await waitFor(() => Date.now() - managed.startTime.getTime() > 2000, { what: "the timeout to pass" });
      expect(managed.exit).toBeUndefined();
      for await (const _item of reader.items({ follow: true })) {
        // Consume everything so the output drains.
      }
      const exit = await managed.exited;
      expect(exit).toMatchObject({ status: "failed", exitCode: 3, timedOut: false, killed: false, stdoutBytes: 4096 });
      expect(kill.mock.calls.filter(([target]) => target === -pid)).toEqual([[-pid, "SIGKILL"]]);
    } finally {
      kill.mockRestore();
    }
  });
});
