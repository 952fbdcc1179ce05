import { existsSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { maxPendingInputBytes, ProcessError, type ProcessManager } from "../src/process/index.js";
import { waitFor } from "./support/processes.js";
import { startTestManager, type TestManager } from "./support/server.js";

let started: TestManager;
let manager: ProcessManager;
let workspace: string;
beforeAll(async () => {
  started = await startTestManager();
  ({ manager, workspace } = started);
});
afterAll(async () => {
  await started.close();
});

/** The settled state of a promise, observed without awaiting it. */
function track<T>(promise: Promise<T>): { state: "pending" | "resolved" | "rejected"; error?: unknown } {
  const tracked: { state: "pending" | "resolved" | "rejected"; error?: unknown } = { state: "pending" };
  promise.then(
    () => (tracked.state = "resolved"),
    (error: unknown) => {
      tracked.state = "rejected";
      tracked.error = error;
    },
  );
  return tracked;
}

describe("stdin of a PTY process that exits without reading it", () => {
  it("rejects the pending write before the terminal closes, so no byte lands in a file reusing its fd", async () => {
    const managed = await manager.start({ command: "sleep 0.3", pty: { cols: 80, rows: 24 } });
    // More than the terminal's input queue holds: the write stays pending until the exit.
    const data = Buffer.alloc(256 * 1024, "A");
    for (let i = 63; i < data.length; i += 64) data[i] = 10;
    const write = track(managed.write(data));
    await managed.exited;
    expect(write.state).toBe("rejected");
    expect(write.error).toBeInstanceOf(ProcessError);
    expect((write.error as ProcessError).reason).toBe("PROCESS_NOT_RUNNING");
  });
});

describe("ManagedProcess.write with a signal", () => {
  it("drops an aborted write still queued, keeps later writes flowing, and closes stdin without waiting", async () => {
    const flag = path.join(workspace, `go-${process.pid}`);
    // Reads nothing until the flag exists: a write larger than the pipe stays pending until then.
    const managed = await manager.start({
      command: `while [ ! -e ${flag} ]; do sleep 0.02; done; wc -c; exit 0`,
      stdin: true,
      autoCleanup: false,
    });
    const big = Buffer.alloc(1024 * 1024, "x");
    const first = new AbortController();
    const second = new AbortController();
    const writes = [
      track(managed.write(big, first.signal)),
      track(managed.write(Buffer.from("dropped"), second.signal)),
      track(managed.write(Buffer.from("after"))),
    ];
    await new Promise((resolve) => setImmediate(resolve));
    first.abort();
    second.abort();
    await waitFor(() => writes[0].state !== "pending" && writes[1].state !== "pending", {
      what: "the aborted writes to reject",
    });
    for (const write of writes.slice(0, 2)) {
      expect(write.state).toBe("rejected");
      expect((write.error as ProcessError).reason).toBe("CANCELED");
    }
    expect(writes[2].state).toBe("pending");
    // The process reads nothing yet: closing must not wait for the pending writes.
    await managed.closeInput();
    expect(managed.isInputClosed).toBe(true);
    writeFileSync(flag, "");
    const exit = await managed.exited;
    expect(exit.exitCode).toBe(0);
    expect(writes[2].state).toBe("resolved");
    // The first write had reached the child before its caller left: its bytes arrive and count.
    // The second had not and is gone; EOF follows the rest.
    expect(Buffer.from(managed.snapshotOutput("stdout")).toString().trim()).toBe(String(big.length + 5));
    expect(managed.bytesWritten).toBe(big.length + 5);
    expect(existsSync(flag)).toBe(true);
  });

  it("refuses input beyond the pending limit with LIMIT_EXCEEDED, and settles pending writes at exit", async () => {
    const managed = await manager.start({ command: "sleep 60", stdin: true });
    const pending = track(managed.write(Buffer.alloc(maxPendingInputBytes)));
    const error = await managed.write(Buffer.from("x")).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ProcessError);
    expect((error as ProcessError).reason).toBe("LIMIT_EXCEEDED");
    expect((error as ProcessError).metadata).toMatchObject({
      limit: "max-pending-input-bytes",
      value: String(maxPendingInputBytes),
    });
    expect((error as ProcessError).message).toContain(String(maxPendingInputBytes));
    const aborted = new AbortController();
    aborted.abort();
    await expect(managed.write(Buffer.from("y"), aborted.signal)).rejects.toMatchObject({ reason: "CANCELED" });
    managed.kill("SIGKILL");
    await managed.exited;
    await waitFor(() => pending.state === "rejected", { what: "the pending write to reject" });
  });
});
