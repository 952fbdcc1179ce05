import { mkdtempSync, readdirSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterEach, describe, expect, it } from "vitest";
import { ExitCause, ProcessStatus, SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { startDaemonProcess as startDaemon } from "./support/daemon-process.js";
import { isAlive, waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";

describe("unclean daemon death (SIGKILL)", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });

  it("leaves nothing running unaccounted: the next start on the same state directory kills the leftovers", async () => {
    const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-death-ws-")));
    const stateDir = path.join(realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-death-state-"))), "state");
    cleanups.push(() => {
      rmSync(workspace, { recursive: true, force: true });
      rmSync(path.dirname(stateDir), { recursive: true, force: true });
    });
    const first = await startDaemon(["--workspace", workspace, "--state-dir", stateDir]);
    cleanups.push(() => first.child.kill("SIGKILL"));
    const sessionManager = new Http2SessionManager(first.url);
    cleanups.push(() => sessionManager.abort());
    const client = createClient(SandboxService, createGrpcTransport({ baseUrl: first.url, sessionManager }));

    const background = sleepMarker();
    const escaped = sleepMarker();
    const followed = sleepMarker();
    // A background process, one that left its process group with setsid, and an Exec in progress.
    const started = await client.startProcess({
      spec: { command: `sleep ${background} & setsid sleep ${escaped} & wait`, sessionId: "agent-7" },
    });
    const exec = client.exec({ spec: { command: "sleep", args: [followed] } })[Symbol.asyncIterator]();
    const execStarted = await exec.next();
    const execId = execStarted.value?.event.case === "started" ? execStarted.value.event.value.processId : "";
    expect(execId).not.toBe("");
    const startedAt = started.process!.startTime!;
    await waitFor(() => sleepers(background).length + sleepers(escaped).length + sleepers(followed).length === 3, {
      what: "three sleepers",
    });
    expect(readdirSync(stateDir).filter((name) => name.endsWith(".json"))).toHaveLength(2);
    const pids = [...sleepers(background), ...sleepers(escaped), ...sleepers(followed)];
    cleanups.push(() => pids.forEach((pid) => isAlive(pid) && process.kill(pid, "SIGKILL")));

    first.child.kill("SIGKILL");
    await waitFor(() => first.child.exitCode !== null || first.child.signalCode !== null, {
      what: "the daemon to die",
    });
    sessionManager.abort();
    // The kernel does not kill a dead daemon's children: they run on until the next start of a daemon,
    // this test's second one or any other on the machine (a daemon starting in another test file sweeps
    // every dead daemon's cgroups), so only the end state is asserted: nothing of them left.

    const second = await startDaemon(["--workspace", workspace, "--state-dir", stateDir]);
    cleanups.push(() => second.child.kill("SIGKILL"));
    await waitFor(() => pids.every((pid) => !isAlive(pid)), { timeoutMs: 10_000, what: "the leftovers to be killed" });
    expect(readdirSync(stateDir).filter((name) => name.endsWith(".json"))).toHaveLength(0);

    // The new daemon keeps a record of each: it cannot tell how they ended, and says so (cause UNKNOWN),
    // killed by it or, when another daemon's sweep came first, already gone.
    const secondSession = new Http2SessionManager(second.url);
    cleanups.push(() => secondSession.abort());
    const after = createClient(
      SandboxService,
      createGrpcTransport({ baseUrl: second.url, sessionManager: secondSession }),
    );
    const lost = (await after.getProcess({ processId: started.process!.processId })).process!;
    expect(lost).toMatchObject({
      command: `sleep ${background} & setsid sleep ${escaped} & wait`,
      args: [],
      cwd: workspace,
      sessionId: "agent-7",
      status: expect.toSatisfy((status: ProcessStatus) =>
        [ProcessStatus.KILLED, ProcessStatus.FAILED].includes(status),
      ),
    });
    expect(lost.exit).toMatchObject({
      cause: ExitCause.UNKNOWN,
      error: expect.stringContaining("started by a daemon that ended"),
    });
    expect(lost.exit!.exitCode).toBeUndefined();
    expect(lost.exit!.startTime).toEqual(startedAt);
    const lostExec = (await after.getProcess({ processId: execId })).process!;
    expect(lostExec).toMatchObject({ command: "sleep", args: [followed], sessionId: "" });
    expect(lostExec.exit?.cause).toBe(ExitCause.UNKNOWN);
    expect((await after.listProcesses({ sessionId: "agent-7" })).processes.map((record) => record.processId)).toEqual([
      started.process!.processId,
    ]);
    secondSession.abort();
    second.child.kill("SIGTERM");
    await waitFor(() => second.child.exitCode !== null || second.child.signalCode !== null, {
      what: "a clean shutdown",
    });
  }, 60_000);
});
