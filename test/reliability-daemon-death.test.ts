import { mkdtempSync, readdirSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterEach, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
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
    await client.startProcess({ spec: { command: `sleep ${background} & setsid sleep ${escaped} & wait` } });
    const exec = client.exec({ spec: { command: "sleep", args: [followed] } })[Symbol.asyncIterator]();
    await exec.next();
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
    second.child.kill("SIGTERM");
    await waitFor(() => second.child.exitCode !== null || second.child.signalCode !== null, {
      what: "a clean shutdown",
    });
  }, 60_000);
});
