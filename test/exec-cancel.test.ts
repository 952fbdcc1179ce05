import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { groupMembers, processesWithMarker, waitFor } from "./support/processes.js";
import { Code, ProcessStatus, rpcError, sleepMarker, sleepers, waitForExit } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

/**
 * Starts an Exec of `command` with an AbortController and reads until `ready(outputBytes)` holds;
 * returns the started record, the controller and the still-open iterator.
 */
async function startExec(
  command: string,
  ready: (outputBytes: number) => boolean,
  options: { timeoutMs?: number } = {},
) {
  const controller = new AbortController();
  const stream = t.client.exec(
    { spec: { command, autoCleanup: false } },
    { signal: controller.signal, timeoutMs: options.timeoutMs },
  );
  const iterator = stream[Symbol.asyncIterator]();
  const first = await iterator.next();
  if (first.done || first.value.event.case !== "started") throw new Error("no started event");
  const started = first.value.event.value;
  let outputBytes = 0;
  while (!ready(outputBytes)) {
    const next = await iterator.next();
    if (next.done) throw new Error("stream ended early");
    if (next.value.event.case === "output") outputBytes += next.value.event.value.data.length;
  }
  return { started, controller, iterator };
}

describe("cancelling an Exec call", () => {
  it("kills the command's whole process group when the client aborts", async () => {
    const marker = sleepMarker();
    const { started, controller, iterator } = await startExec(`sh -c 'sleep ${marker} & sleep ${marker}'`, () => true);
    await waitFor(() => sleepers(marker).length === 2, { what: "both sleeps to run" });
    controller.abort();
    const error = await rpcError(iterator.next());
    expect(Code[error.code]).toBe(Code[Code.Canceled]);
    await waitFor(() => processesWithMarker(marker).length === 0 && groupMembers(started.pid).length === 0, {
      timeoutMs: 5000,
      what: "the group to be killed",
    });
    const exit = await waitForExit(t.client, started.processId);
    expect(exit.status).toBe(ProcessStatus.KILLED);
    expect(exit.killed).toBe(true);
  });

  it("kills a command that is blocked on a full pipe because the caller stopped reading", async () => {
    // `yes` fills the pipe and the HTTP/2 window at once; the handler is then parked on a write.
    const marker = `cancel-while-blocked-${sleepMarker()}`;
    const { started, controller } = await startExec(`yes ${marker}`, (bytes) => bytes > 1024 * 1024);
    controller.abort();
    await waitFor(() => processesWithMarker(marker).length === 0 && groupMembers(started.pid).length === 0, {
      timeoutMs: 5000,
      what: "yes to be killed",
    });
    expect((await waitForExit(t.client, started.processId)).status).toBe(ProcessStatus.KILLED);
    // The handler parked on a write that will never complete is released too.
    await waitFor(() => t.server.activeCalls === 0, { timeoutMs: 5000, what: "the cancelled call to be released" });
  });

  it("kills the group when the call's deadline passes", async () => {
    const marker = sleepMarker();
    const controller = new AbortController();
    const stream = t.client.exec(
      { spec: { command: `sleep ${marker} & sleep ${marker}; wait` } },
      { timeoutMs: 500, signal: controller.signal },
    );
    const error = await rpcError(async () => {
      for await (const _ of stream) {
        // Read until the deadline ends the call.
      }
    });
    expect(Code[error.code]).toBe(Code[Code.DeadlineExceeded]);
    await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 5000, what: "the group to be killed" });
  });

  it("kills the group when the client's connection drops", async () => {
    const { createClient } = await import("@connectrpc/connect");
    const { createGrpcTransport, Http2SessionManager } = await import("@connectrpc/connect-node");
    const { SandboxService } = await import("../gen/sandbox/v1/sandbox_pb.js");
    const sessionManager = new Http2SessionManager(t.server.url);
    const client = createClient(SandboxService, createGrpcTransport({ baseUrl: t.server.url, sessionManager }));
    const marker = sleepMarker();
    const iterator = client
      .exec({ spec: { command: `sleep ${marker} & sleep ${marker}; wait` } })
      [Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.value?.event.case).toBe("started");
    await waitFor(() => sleepers(marker).length === 2, { what: "both sleeps to run" });
    sessionManager.abort();
    await rpcError(iterator.next());
    await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 5000, what: "the group to be killed" });
  });
});

describe("timeout", () => {
  it("kills the whole group with SIGKILL and reports timed out, status killed", async () => {
    const marker = sleepMarker();
    const events = [];
    for await (const response of t.client.exec({
      // Long enough for the shell to print its line on a busy machine.
      spec: { command: `echo before; sh -c 'sleep ${marker} & sleep ${marker}'`, timeoutMs: 2000 },
    })) {
      events.push(response.event);
    }
    const exited = events.at(-1);
    if (exited?.case !== "exited") throw new Error("no exited event");
    expect(exited.value.status).toBe(ProcessStatus.KILLED);
    expect(exited.value.signal).toBe("SIGKILL");
    expect(exited.value.timedOut).toBe(true);
    expect(exited.value.killed).toBe(false);
    expect(exited.value.exitCode).toBeUndefined();
    const output = events.flatMap((event) => (event.case === "output" ? [Buffer.from(event.value.data)] : []));
    expect(Buffer.concat(output).toString()).toBe("before\n");
    await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 2000, what: "the group to be gone" });
  });

  it("does not fire for a process that finishes in time", async () => {
    const { process } = await t.client.startProcess({
      spec: { command: "echo quick", timeoutMs: 10_000, autoCleanup: false },
    });
    const exit = await waitForExit(t.client, process!.processId);
    expect(exit.status).toBe(ProcessStatus.COMPLETED);
    expect(exit.timedOut).toBe(false);
  });

  it("applies to background processes too", async () => {
    const marker = sleepMarker();
    const { process } = await t.client.startProcess({
      spec: { command: "sleep", args: [marker], timeoutMs: 200, autoCleanup: false },
    });
    const exit = await waitForExit(t.client, process!.processId);
    expect(exit.timedOut).toBe(true);
    expect(exit.signal).toBe("SIGKILL");
    await waitFor(() => sleepers(marker).length === 0, { timeoutMs: 2000 });
  });
});
