import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  isExecResult,
  isProcess,
  isProcessStatus,
  LimitExceededError,
  ProcessAlreadyExistsError,
  ProcessNotFoundError,
  type LogEvent,
  type Process,
  type Sandbox,
} from "../src/client/index.js";
import { InputStream } from "../src/client/core/input-stream.js";
import { groupMembers, waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
let sandbox: Sandbox;
beforeAll(async () => {
  t = await startTestServer();
  sandbox = await connect({ baseUrl: t.server.url, workspace: [t.workspace] });
  // The seed's `node server.js`: a small server that prints, then serves until killed.
  writeFileSync(
    path.join(t.workspace, "server.js"),
    `const http = require("node:http");
     const server = http.createServer((_, res) => res.end("ok"));
     server.listen(0, "127.0.0.1", () => console.log("listening on " + server.address().port));
     process.on("SIGTERM", () => { console.error("shutting down"); process.exit(0); });`,
  );
});
afterAll(async () => {
  await sandbox.close();
  await t.close();
});

describe("background processes (seed 000)", () => {
  it("starts `node server.js` with a processId and callbacks, lists, gets and kills it", async () => {
    const exits: Array<number | null> = [];
    const output: string[] = [];
    const started: Process[] = [];
    const server: Process = await sandbox.startProcess("node server.js", {
      processId: "web-server",
      onExit: (code: number | null) => {
        exits.push(code);
      },
      onOutput: (_stream, data) => output.push(data),
      onStart: (process) => started.push(process),
    });
    expect(started).toEqual([server]);
    expect(isProcess(server)).toBe(true);
    expect(server).toMatchObject({
      id: "web-server",
      command: "node server.js",
      status: "running",
      sessionId: sandbox.sessionId,
    });
    expect(server.pid).toBeGreaterThan(0);
    expect(server.startTime).toBeInstanceOf(Date);
    await waitFor(() => output.join("").includes("listening on"), { what: "the server to listen" });

    const processes: Process[] = await sandbox.listProcesses();
    expect(processes.map((process) => process.id)).toContain("web-server");
    const serverProcess: Process | null = await sandbox.getProcess("web-server");
    expect(serverProcess?.pid).toBe(server.pid);
    expect(await serverProcess?.getStatus()).toBe("running");
    expect((await server.getLogs()).stdout).toMatch(/^listening on \d+\n$/);

    await sandbox.killProcess("web-server");
    await waitFor(() => exits.length === 1, { what: "onExit" });
    // SIGTERM reaches node, which the shell line became (one simple command is exec'd): it exits 0 from its
    // handler, and the record says so, and that the kill asked for it.
    expect(exits).toEqual([0]);
    expect(await server.getStatus()).toBe("completed");
    expect(server.exitCode).toBe(0);
    expect(server.endTime).toBeInstanceOf(Date);
    // node exits from its handler as the record closes: on a loaded machine it can still be leaving.
    await waitFor(() => groupMembers(server.pid!).length === 0, { timeoutMs: 5000, what: "the group to be gone" });
  });

  it("getProcess is null for an unknown id; killProcess and getProcessLogs throw ProcessNotFoundError, made from the daemon's reason", async () => {
    expect(await sandbox.getProcess("no-such-process")).toBeNull();
    await expect(sandbox.killProcess("no-such-process")).rejects.toBeInstanceOf(ProcessNotFoundError);
    const error = await sandbox.getProcessLogs("no-such-process").catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(ProcessNotFoundError);
    // The id is the one the daemon names in its ErrorInfo metadata, not one the client remembered.
    expect(error).toMatchObject({
      code: "PROCESS_NOT_FOUND",
      reason: "PROCESS_NOT_FOUND",
      processId: "no-such-process",
    });
    expect((error as ProcessNotFoundError).metadata).toMatchObject({ process_id: "no-such-process" });
  });

  it("a duplicate live processId is ProcessAlreadyExistsError with the ConnectError as cause", async () => {
    const marker = sleepMarker();
    const first = await sandbox.startProcess(`sleep ${marker}`, { processId: "twice" });
    const error = await sandbox.startProcess("true", { processId: "twice" }).catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(ProcessAlreadyExistsError);
    expect(error).toMatchObject({ code: "PROCESS_EXISTS", reason: "PROCESS_ALREADY_EXISTS", processId: "twice" });
    expect((error as Error).cause).toMatchObject({ name: "ConnectError" });
    await first.kill("SIGKILL");
    await first.wait();
    expect(first.status).toBe("killed");
    expect(first.exitCode).toBe(137);
  });

  it("kill() with a signal reaches the whole group and leaves no process", async () => {
    const marker = sleepMarker();
    const process = await sandbox.startProcess(`sleep ${marker} & sleep ${marker}; wait`);
    await waitFor(() => sleepers(marker).length === 2, { what: "both sleeps" });
    await process.kill("SIGINT");
    const finished = await process.wait();
    expect(finished.signal).toBe("SIGINT");
    expect(finished.exitCode).toBe(130);
    await waitFor(() => sleepers(marker).length === 0, { what: "the group to be gone" });
  });

  it("a daemon at its process limit is LimitExceededError naming the limit", async () => {
    const own = await startTestServer({ maxProcesses: 1 });
    const client = await connect({ baseUrl: own.server.url });
    try {
      const marker = sleepMarker();
      const first = await client.startProcess(`sleep ${marker}`);
      const error = await client.startProcess(`sleep ${marker}`).catch((failure: unknown) => failure);
      expect(error).toBeInstanceOf(LimitExceededError);
      expect(error).toMatchObject({
        code: "RESOURCE_EXHAUSTED",
        reason: "LIMIT_EXCEEDED",
        limit: "max-processes",
        value: 1,
      });
      await first.kill("SIGKILL");
      await first.wait();
    } finally {
      await client.close();
      await own.close();
    }
  });

  it("listProcesses reads every page", async () => {
    const calls: string[] = [];
    // Pages of two records, so five records take three pages.
    const paged = await connect({
      baseUrl: t.server.url,
      sessionId: "paged",
      interceptors: [
        (next) => (request) => {
          calls.push(request.method.name);
          if (request.method.name === "ListProcesses" && !request.stream)
            (request.message as unknown as { pageSize: number }).pageSize = 2;
          return next(request);
        },
      ],
    });
    try {
      const started = [];
      for (let i = 0; i < 5; i++) started.push(await paged.startProcess("true", { autoCleanup: false }));
      await Promise.all(started.map((process) => process.wait()));
      calls.length = 0;
      const listed = await paged.listProcesses();
      expect(listed.map((process) => process.id).sort()).toEqual(started.map((process) => process.id).sort());
      expect(calls).toEqual(["ListProcesses", "ListProcesses", "ListProcesses"]);
    } finally {
      await paged.cleanupCompletedProcesses();
      await paged.close();
    }
  });

  it("killAllProcesses counts the live processes of the sandbox, cleanupCompletedProcesses the exited records", async () => {
    const own = await connect({ baseUrl: t.server.url });
    try {
      const marker = sleepMarker();
      const live = await Promise.all([1, 2, 3].map(() => own.startProcess(`sleep ${marker}`, { autoCleanup: false })));
      const done = await own.startProcess("true", { autoCleanup: false });
      await done.wait();
      await waitFor(() => sleepers(marker).length === 3, { what: "three sleeps" });
      expect(await own.killAllProcesses()).toBe(3);
      await Promise.all(live.map((process) => process.wait()));
      expect(sleepers(marker)).toEqual([]);
      expect((await own.listProcesses()).map((process) => process.status).sort()).toEqual([
        "completed",
        "killed",
        "killed",
        "killed",
      ]);
      expect(await own.cleanupCompletedProcesses()).toBe(4);
      expect(await own.listProcesses()).toEqual([]);
      expect(await own.killAllProcesses()).toBe(0);
    } finally {
      await own.close();
    }
  });

  it("getProcessLogs returns the retained stdout and stderr in one call", async () => {
    const calls: string[] = [];
    const counted = await connect({
      baseUrl: t.server.url,
      interceptors: [(next) => (request) => (calls.push(request.method.name), next(request))],
    });
    try {
      const process = await counted.startProcess("echo out; echo err >&2", { processId: "logs-1" });
      await process.wait();
      calls.length = 0;
      expect(await counted.getProcessLogs("logs-1")).toEqual({
        stdout: "out\n",
        stderr: "err\n",
        processId: "logs-1",
        dropped: [],
      });
      expect(calls).toEqual(["GetProcessLogs"]);
    } finally {
      await counted.close();
    }
  });

  it("getOutput is the Together SDK's snapshot: joined output, the exit code once there is one, never a wait", async () => {
    const marker = sleepMarker();
    const process = await sandbox.startProcess(`echo one; echo two >&2; sleep ${marker}`);
    await waitFor(async () => (await sandbox.getOutput(process.id)).output.length === 8, { what: "both lines" });
    const running = await sandbox.getOutput(process.id);
    expect(running.exitCode).toBeUndefined();
    expect(running.output.split("\n").sort()).toEqual(["", "one", "two"]);
    await process.kill("SIGKILL");
    await process.wait();
    expect(await sandbox.getOutput(process.id)).toMatchObject({ exitCode: 137 });
    await expect(sandbox.getOutput("no-such-process")).rejects.toBeInstanceOf(ProcessNotFoundError);
  });

  it("streamProcessLogs yields LogEvents as the seed's loop reads them, ending at the exit", async () => {
    await sandbox.startProcess("echo first; sleep 0.2; echo second; echo problem >&2", { processId: "log-stream" });
    const lines: string[] = [];
    const events: LogEvent[] = [];
    for await (const log of sandbox.streamProcessLogs("log-stream")) {
      events.push(log);
      if (log.type === "stdout") {
        lines.push(`[${log.processId}] ${log.data}`);
      }
    }
    expect(lines.join("")).toBe("[log-stream] first\n[log-stream] second\n");
    expect(events[0]).toMatchObject({
      type: "status",
      data: "running",
      processId: "log-stream",
      sessionId: sandbox.sessionId,
    });
    expect(events.at(-1)).toMatchObject({ type: "status", data: "completed" });
    expect(events.filter((event) => event.type === "stderr").map((event) => event.data)).toEqual(["problem\n"]);
  });

  it("streamProcessLogs stops when its signal aborts, leaving the process running", async () => {
    const marker = sleepMarker();
    const process = await sandbox.startProcess(`echo up; sleep ${marker}`);
    const controller = new AbortController();
    const types: string[] = [];
    for await (const log of sandbox.streamProcessLogs(process.id, { signal: controller.signal })) {
      types.push(log.type);
      if (log.type === "stdout") controller.abort();
    }
    expect(types).toEqual(["status", "stdout"]);
    expect(await process.getStatus()).toBe("running");
    await process.kill();
    await process.wait();
  });

  it("autoCleanup: false keeps the record after exit; the default removes it after the linger time", async () => {
    const own = await startTestServer({ lingerMs: 200 });
    const client = await connect({ baseUrl: own.server.url });
    try {
      const kept = await client.startProcess("true", { autoCleanup: false });
      const removed = await client.startProcess("true");
      await Promise.all([kept.wait(), removed.wait()]);
      await waitFor(async () => (await client.getProcess(removed.id)) === null, {
        what: "the auto-cleaned record to go",
      });
      expect((await client.getProcess(kept.id))?.status).toBe("completed");
    } finally {
      await client.close();
      await own.close();
    }
  });

  it("stdin: true keeps a pipe open for sendInput", async () => {
    const process = await sandbox.startProcess("cat", { stdin: true });
    expect((await process.sendInput("hello ")).bytesWritten).toBe(6);
    expect(await process.sendInput(new TextEncoder().encode("world"))).toEqual({ bytesWritten: 11, closed: false });
    expect(await process.closeInput()).toEqual({ bytesWritten: 11, closed: true });
    expect((await process.wait()).stdout()).toBe("hello world");
  });

  it("concurrent sendInput calls share one input stream in order; detach leaves no call open, even one still opening", async () => {
    const before = t.server.activeCalls;
    const process = await sandbox.startProcess("cat", { stdin: true });
    const acks = await Promise.all([process.sendInput("a"), process.sendInput("b"), process.sendInput("c")]);
    expect(acks.map((ack) => ack.bytesWritten)).toEqual([1, 2, 3]);
    expect(t.server.activeCalls - before).toBe(1);
    await process.closeInput();
    expect((await process.wait()).stdout()).toBe("abc");
    process.detach();
    await waitFor(() => t.server.activeCalls === before, { what: "the input stream to close" });

    const other = await sandbox.startProcess("cat", { stdin: true });
    const opening = other.sendInput("x");
    other.detach();
    await opening.catch(() => {});
    await expect(other.sendInput("y")).rejects.toMatchObject({ code: "DETACHED" });
    await waitFor(() => t.server.activeCalls === before, { what: "no input stream left open" });
    await other.kill("SIGKILL");
  });

  it("an input stream closed while still opening is ended once it opens", async () => {
    const before = t.server.activeCalls;
    const process = await sandbox.startProcess("cat", { stdin: true });
    const input = new InputStream(sandbox.client, process.id);
    const sending = input.send({ case: "data", value: new TextEncoder().encode("x") });
    input.close();
    await sending.catch(() => {});
    await waitFor(() => t.server.activeCalls === before, { what: "the input stream to close" });
    await process.kill("SIGKILL");
    await process.wait();
  });

  it("a start that fails is status error with exit code 127", async () => {
    const process = await sandbox.startProcess("no-such-program-xyz", { args: ["x"] });
    const finished = await process.wait();
    expect(finished.status).toBe("error");
    expect(finished.exitCode).toBe(127);
  });
});

describe("type guards (seed 000)", () => {
  it("recognise results, processes and statuses", async () => {
    const result = await sandbox.exec("true");
    expect(isExecResult(result)).toBe(true);
    expect(isProcess(result)).toBe(false);
    expect(isProcessStatus("killed")).toBe(true);
    expect(isProcessStatus("sleeping")).toBe(false);
    expect(["starting", "running", "completed", "failed", "killed", "error"].every(isProcessStatus)).toBe(true);
  });
});
