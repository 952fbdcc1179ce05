import { writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  ProcessExitedBeforeReadyError,
  ProcessReadyTimeoutError,
  type Sandbox,
  SandboxError,
} from "../src/client/index.js";
import { sleepMarker } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

// The client's readiness calls (Cloudflare's names on a process handle, listPorts on the sandbox)
// against a real daemon running real servers.
let t: TestServer;
let sandbox: Sandbox;
beforeAll(async () => {
  t = await startTestServer();
  sandbox = await connect({ baseUrl: t.server.url, workspace: [t.workspace] });
  // A node server that says it starts, binds PORT 1.5 s later, then says where it listens.
  writeFileSync(
    path.join(t.workspace, "late-server.js"),
    `console.log("starting");
     setTimeout(() => {
       const server = require("node:http").createServer((req, res) => res.writeHead(req.url === "/health" ? 204 : 404).end());
       server.listen(Number(process.env.PORT), "127.0.0.1", () => console.log("listening on " + server.address().port));
     }, 1500);`,
  );
});
afterAll(async () => {
  await sandbox.close({ killProcesses: true });
  await t.close();
});

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("a process handle's waits (Cloudflare's waitForPort, waitForLog, waitForExit)", () => {
  it("finds a node server that binds after 1.5 s by its health check, its log line and its port in listPorts", async () => {
    const port = await freePort();
    const server = await sandbox.startProcess("node late-server.js", { env: { PORT: String(port) } });
    const ready = await server.waitForPort(port, { path: "/health", status: 204, timeout: 30_000 });
    expect(ready).toMatchObject({ address: `127.0.0.1:${port}`, httpStatus: 204 });
    // Printed before this wait began, still found; the match as RegExp.exec gives it.
    const logged = await server.waitForLog(/listening on (?<port>\d+)/, 10_000);
    expect(logged).toMatchObject({ line: `listening on ${port}`, stream: "stdout", lineOffset: 9, offset: 9 });
    expect([...logged.match!]).toEqual([`listening on ${port}`, String(port)]);
    expect(logged.match).toMatchObject({ index: 0, input: `listening on ${port}`, groups: { port: String(port) } });
    const listed = (await sandbox.listPorts()).find((entry) => entry.port === port);
    expect(listed).toMatchObject({ address: "127.0.0.1", processId: server.id, program: "node" });
    expect(listed?.pid).toBeGreaterThan(0);
    expect(await sandbox.listPorts({ processId: server.id })).toHaveLength(1);
    await server.kill("SIGKILL");
  });

  it("ends a wait for a port never bound with ProcessReadyTimeoutError carrying the last log lines", async () => {
    const port = await freePort();
    const server = await sandbox.startProcess(`echo compiling; echo 'warning: slow' >&2; sleep ${sleepMarker(60)}`);
    try {
      await server.waitForLog("warning: slow", { stream: "stderr", timeout: 10_000 });
      const error = await server.waitForPort(port, { mode: "tcp", timeout: 1500 }).catch((failure) => failure);
      expect(error).toBeInstanceOf(ProcessReadyTimeoutError);
      expect(error).toMatchObject({
        code: "PROCESS_READY_TIMEOUT",
        reason: "WAIT_TIMED_OUT",
        processId: server.id,
        timeout: 1500,
        condition: `port ${port}`,
        lastStdout: "compiling",
        lastStderr: "warning: slow",
      });
      expect(error.lastProbe).toContain(`127.0.0.1:${port}: connection refused`);
    } finally {
      await server.kill("SIGKILL");
    }
  });

  it("fails at once with ProcessExitedBeforeReadyError, its exit and last lines, when the process exits first", async () => {
    const port = await freePort();
    const server = await sandbox.startProcess("echo 'Error: EADDRINUSE' >&2; exit 1");
    const error = await server.waitForPort(port, { timeout: 60_000 }).catch((failure) => failure);
    expect(error).toBeInstanceOf(ProcessExitedBeforeReadyError);
    expect(error).toMatchObject({
      code: "PROCESS_EXITED_BEFORE_READY",
      reason: "PROCESS_EXITED",
      processId: server.id,
      exitCode: 1,
      condition: `port ${port} (HTTP /)`,
      lastStderr: "Error: EADDRINUSE",
      exit: { status: "failed", exitCode: 1, stderrBytes: 18 },
    });
    const logged = await server.waitForLog("ready", 60_000).catch((failure) => failure);
    expect(logged).toBeInstanceOf(ProcessExitedBeforeReadyError);
  });

  it("matches a string as it is, refuses flags the daemon cannot honour, and stops when its signal aborts", async () => {
    const worker = await sandbox.startProcess(
      `echo 'api (v1.2) up?'; printf 'half'; sleep 0.3; echo ' line'; sleep ${sleepMarker(60)}`,
    );
    try {
      expect((await worker.waitForLog("(v1.2) up?", 10_000)).line).toBe("api (v1.2) up?");
      expect((await worker.waitForLog("half line", 10_000)).lineOffset).toBe(15);
      const flagged = await worker.waitForLog(/UP/i).catch((failure) => failure);
      expect(flagged).toBeInstanceOf(SandboxError);
      expect(flagged).toMatchObject({ code: "INVALID_ARGUMENT" });
      const invalid = await worker.waitForLog(/(a)\1/).catch((failure) => failure);
      expect(invalid).toMatchObject({ code: "INVALID_ARGUMENT", reason: "PATTERN_INVALID" });
      const controller = new AbortController();
      const waiting = worker.waitForLog("never printed", { signal: controller.signal }).catch((failure) => failure);
      controller.abort(new Error("no longer needed"));
      expect(((await waiting) as Error).message).toBe("no longer needed");
    } finally {
      await worker.kill("SIGKILL");
    }
  });

  it("waitForExit resolves with the exit and updates the handle; its timeout leaves the process running", async () => {
    const job = await sandbox.startProcess("echo started; sleep 3; exit 5");
    // The line first: on a busy machine the shell may not have printed it within the 100 ms wait.
    await job.waitForLog("started", { timeout: 30_000 });
    const early = await job.waitForExit(100).catch((failure) => failure);
    expect(early).toBeInstanceOf(ProcessReadyTimeoutError);
    expect(early).toMatchObject({ condition: "exit", lastStdout: "started" });
    const exit = await job.waitForExit({ timeout: 30_000 });
    expect(exit).toMatchObject({ exitCode: 5, status: "failed" });
    expect(job).toMatchObject({ exitCode: 5, status: "failed" });
  });

  it("the sandbox waits for a port of no process of its own, by TCP", async () => {
    const listener = net.createServer();
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = listener.address() as net.AddressInfo;
      expect(await sandbox.waitForPort(port, { mode: "tcp", timeout: 10_000 })).toMatchObject({ httpStatus: 0 });
    } finally {
      listener.close();
    }
  });
});
