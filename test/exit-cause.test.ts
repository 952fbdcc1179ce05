import { chmodSync, writeFileSync } from "node:fs";
import path from "node:path";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ExitCause, KillOrigin, SandboxService, StartStage } from "../gen/sandbox/v1/sandbox_pb.js";
import { processesWithMarker, waitFor } from "./support/processes.js";
import { collectExec, ProcessStatus, sleepMarker, sleepers, waitForExit } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { resolveUser } from "../src/process/index.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

/** Starts `sleep <marker>` (a shell line, or argv form with `argv`) in the background; resolves once it runs. */
async function startSleep(options: { argv?: boolean; timeoutMs?: number; pty?: boolean } = {}) {
  const marker = sleepMarker();
  const spec = options.argv ? { command: "sleep", args: [marker] } : { command: `sleep ${marker}` };
  const { process } = await t.client.startProcess({
    spec: { ...spec, autoCleanup: false, timeoutMs: options.timeoutMs, pty: options.pty ? {} : undefined },
  });
  expect(process?.status).toBe(ProcessStatus.RUNNING);
  await waitFor(() => sleepers(marker).length === 1, { what: "the sleep to run" });
  return { processId: process!.processId, marker, sleeper: sleepers(marker)[0]! };
}

/** Sends `signal` to `pid` from a sibling command inside the sandbox (`kill`, run by the daemon too). */
async function killFromSibling(pid: number, signal: string) {
  const result = await collectExec(t.client, { command: `kill -${signal} ${pid}` });
  expect(result.exited.exitCode).toBe(0);
}

describe("the exit cause", () => {
  it("is EXITED for a command that exits on its own, with its code", async () => {
    const result = await collectExec(t.client, { command: "exit 3" });
    expect(result.exited.cause).toBe(ExitCause.EXITED);
    expect(result.exited.exitCode).toBe(3);
    expect(result.exited.causeDetail).toBeUndefined();
  });

  it("is SIGNALED for sleep killed by a signal from a sibling process, argv form and shell line alike", async () => {
    for (const argv of [true, false]) {
      const { processId, sleeper } = await startSleep({ argv });
      await killFromSibling(sleeper, "TERM");
      const exit = await waitForExit(t.client, processId);
      expect({ argv, cause: exit.cause, signal: exit.signal, code: exit.exitCode }).toEqual({
        argv,
        cause: ExitCause.SIGNALED,
        signal: "SIGTERM",
        code: undefined,
      });
      expect(exit.status).toBe(ProcessStatus.KILLED);
      expect(exit.killed).toBe(false);
    }
  });

  it("is SIGNALED with the signal for a shell line whose program a sibling killed, in a PTY too", async () => {
    const { processId, sleeper } = await startSleep({ pty: true });
    await killFromSibling(sleeper, "INT");
    const exit = await waitForExit(t.client, processId);
    expect(exit.cause).toBe(ExitCause.SIGNALED);
    expect(exit.signal).toBe("SIGINT");
  });

  it("keeps the shell's exit code for a line the shell runs as a list", async () => {
    // The shell waits for sleep and reports 128+15 as its own code: a list is the shell's to report.
    const marker = sleepMarker();
    const { process } = await t.client.startProcess({
      spec: { command: `sleep ${marker}; exit $?`, autoCleanup: false },
    });
    await waitFor(() => sleepers(marker).length === 1);
    await killFromSibling(sleepers(marker)[0]!, "TERM");
    const exit = await waitForExit(t.client, process!.processId);
    expect(exit.cause).toBe(ExitCause.EXITED);
    expect(exit.exitCode).toBe(143);
  });

  it("is KILLED_ON_REQUEST from KillProcess and KillAllProcesses, with the origin", async () => {
    const one = await startSleep();
    await t.client.killProcess({ processId: one.processId });
    const killed = await waitForExit(t.client, one.processId);
    expect(killed.cause).toBe(ExitCause.KILLED_ON_REQUEST);
    expect(killed.causeDetail?.killOrigin).toBe(KillOrigin.KILL_PROCESS);
    expect(killed.signal).toBe("SIGTERM");
    expect(killed.killed).toBe(true);

    const sessionId = `cause-${sleepMarker()}`;
    const marker = sleepMarker();
    const { process } = await t.client.startProcess({
      spec: { command: "sleep", args: [marker], sessionId, autoCleanup: false },
    });
    await waitFor(() => sleepers(marker).length === 1);
    expect((await t.client.killAllProcesses({ sessionId, signal: "SIGKILL" })).killedCount).toBe(1);
    const all = await waitForExit(t.client, process!.processId);
    expect(all.cause).toBe(ExitCause.KILLED_ON_REQUEST);
    expect(all.causeDetail?.killOrigin).toBe(KillOrigin.KILL_ALL);
    expect(all.signal).toBe("SIGKILL");
  });

  it("is KILLED_ON_REQUEST with origin SEND_INPUT for a signal sent through SendInput that ended it", async () => {
    const marker = sleepMarker();
    const { process } = await t.client.startProcess({
      spec: { command: "sleep", args: [marker], stdin: true, autoCleanup: false },
    });
    await waitFor(() => sleepers(marker).length === 1);
    const requests = (async function* () {
      yield { input: { case: "open" as const, value: { processId: process!.processId } } };
      yield { input: { case: "signal" as const, value: "SIGINT" } };
    })();
    for await (const _ of t.client.sendInput(requests)) {
      // Each is acknowledged; the stream ends once the requests do.
    }
    const exit = await waitForExit(t.client, process!.processId);
    expect(exit.cause).toBe(ExitCause.KILLED_ON_REQUEST);
    expect(exit.causeDetail?.killOrigin).toBe(KillOrigin.SEND_INPUT);
    expect(exit.signal).toBe("SIGINT");
  });

  it("is TIMED_OUT when its timeout expires, in the Exec stream's exited event", async () => {
    const marker = sleepMarker();
    const result = await collectExec(t.client, { command: `sleep ${marker}`, timeoutMs: 300 });
    expect(result.exited.cause).toBe(ExitCause.TIMED_OUT);
    expect(result.exited.timedOut).toBe(true);
    expect(result.exited.signal).toBe("SIGKILL");
    await waitFor(() => processesWithMarker(marker).length === 0);
  });

  it("is KILLED_ON_REQUEST with origin CANCEL when the Exec call is cancelled", async () => {
    const marker = sleepMarker();
    const controller = new AbortController();
    const processId = `cancel-${marker}`;
    const stream = t.client.exec(
      { spec: { command: `sleep ${marker}`, processId, autoCleanup: false } },
      { signal: controller.signal },
    );
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.event.case).toBe("started");
    await waitFor(() => sleepers(marker).length === 1);
    controller.abort();
    await iterator.next().catch(() => {});
    const exit = await waitForExit(t.client, processId);
    expect(exit.cause).toBe(ExitCause.KILLED_ON_REQUEST);
    expect(exit.causeDetail?.killOrigin).toBe(KillOrigin.CANCEL);
  });

  it.each([
    { caller: "a gRPC caller, which resets the stream", transport: () => undefined },
    {
      caller: "an HTTP/1.1 caller, which gives up by closing its socket",
      transport: () => createConnectTransport({ baseUrl: t.server.url, httpVersion: "1.1" }),
    },
  ])(
    "is KILLED_ON_REQUEST with origin DEADLINE when the Exec call's deadline passes: $caller",
    async ({ transport }) => {
      const marker = sleepMarker();
      const processId = `deadline-${marker}`;
      const own = transport();
      const client = own === undefined ? t.client : createClient(SandboxService, own);
      const ended = collectExec(
        client,
        { command: `sleep ${marker}`, processId, autoCleanup: false },
        { timeoutMs: 1500 },
      ).catch((error: unknown) => error);
      await waitFor(() => sleepers(marker).length === 1, { what: "the sleep to run" });
      expect(await ended).toMatchObject({ code: Code.DeadlineExceeded });
      const exit = await waitForExit(t.client, processId);
      expect(exit.cause).toBe(ExitCause.KILLED_ON_REQUEST);
      expect(exit.causeDetail?.killOrigin).toBe(KillOrigin.DEADLINE);
      await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be gone" });
    },
  );

  it("is KILLED_ON_REQUEST with origin DISCONNECT when the Exec call's connection is lost", async () => {
    const marker = sleepMarker();
    const processId = `disconnect-${marker}`;
    const sessionManager = new Http2SessionManager(t.server.url);
    const client = createClient(SandboxService, createGrpcTransport({ baseUrl: t.server.url, sessionManager }));
    const iterator = client
      .exec({ spec: { command: `sleep ${marker}`, processId, autoCleanup: false } })
      [Symbol.asyncIterator]();
    expect((await iterator.next()).value?.event.case).toBe("started");
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep to run" });
    // The client's connection goes away as a crashed client's would: no cancel, the socket destroyed.
    sessionManager.abort();
    await iterator.next().catch(() => {});
    const exit = await waitForExit(t.client, processId);
    expect(exit.cause).toBe(ExitCause.KILLED_ON_REQUEST);
    expect(exit.causeDetail?.killOrigin).toBe(KillOrigin.DISCONNECT);
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be gone" });
  });

  it("is START_FAILED at exec with the errno for a missing program and one that is not executable", async () => {
    // A shell line naming a missing program is the shell's to report: the shell ran, and exited 127.
    const line = await collectExec(t.client, { command: "no-such-program-cause" });
    expect(line.exited.cause).toBe(ExitCause.EXITED);
    expect(line.exited.exitCode).toBe(127);
    const notFound = await collectExec(t.client, { command: "no-such-program-cause", args: ["x"] });
    expect(notFound.exited.status).toBe(ProcessStatus.ERROR);
    expect(notFound.exited.exitCode).toBe(127);
    expect(notFound.exited.cause).toBe(ExitCause.START_FAILED);
    expect(notFound.exited.causeDetail?.startStage).toBe(StartStage.EXEC);
    expect(notFound.exited.causeDetail?.errno).toBe("ENOENT");

    const script = path.join(t.workspace, "not-executable.sh");
    writeFileSync(script, "#!/bin/sh\necho hi\n");
    chmodSync(script, 0o644);
    const denied = await collectExec(t.client, { command: "./not-executable.sh", args: ["x"] });
    expect(denied.exited.exitCode).toBe(126);
    expect(denied.exited.cause).toBe(ExitCause.START_FAILED);
    expect(denied.exited.causeDetail?.startStage).toBe(StartStage.EXEC);
    expect(denied.exited.causeDetail?.errno).toBe("EACCES");
  });

  it.skipIf(process.getuid?.() !== 0)(
    "is START_FAILED at exec with EACCES when the helper, as the command's user, cannot execute the program, in a PTY too",
    async () => {
      const switched = await startTestServer(
        { runAs: resolveUser("nobody"), token: "cause-token" },
        { sendToken: true },
      );
      try {
        chmodSync(switched.workspace, 0o755);
        // Executable for root, who looks the program up, but not for nobody, whom the helper execs it as.
        const program = path.join(switched.workspace, "root-only");
        writeFileSync(program, "#!/bin/sh\necho hi\n");
        chmodSync(program, 0o700);
        // On pipes and in a terminal alike: the helper reports on its status fd, not as an exit code 126.
        for (const pty of [undefined, {}]) {
          const result = await collectExec(switched.client, { command: program, args: ["x"], pty });
          expect({ pty, status: result.exited.status, exitCode: result.exited.exitCode }).toEqual({
            pty,
            status: ProcessStatus.ERROR,
            exitCode: 126,
          });
          expect(result.exited.cause).toBe(ExitCause.START_FAILED);
          expect(result.exited.causeDetail?.startStage).toBe(StartStage.EXEC);
          expect(result.exited.causeDetail?.errno).toBe("EACCES");
        }
      } finally {
        await switched.close();
      }
    },
  );
});
