import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import {
  connect,
  createClient,
  createSandboxConnection,
  SandboxError,
  SandboxService,
  type Sandbox,
} from "../src/client/index.js";
import { startBlackholeProxy, type BlackholeProxy } from "./support/blackhole-proxy.js";
import { waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

// A path that goes silent (no FIN, no RST) must not hang a call: the client PINGs the connection
// and gives it up when a PING goes unanswered, so a dead path is noticed within
// pingIntervalMs + pingTimeoutMs of the last byte read. Short values keep the test quick.
const pingIntervalMs = 300;
const pingTimeoutMs = 300;
/** What the test allows for noticing, with room for a busy machine. */
const boundMs = 5_000;

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

/** Settles `promise` and tells whether it did within `timeoutMs`, with its value or error. */
async function settlesWithin<T>(
  promise: Promise<T>,
  timeoutMs: number,
): Promise<{ value?: T; error?: unknown; elapsedMs: number }> {
  const started = Date.now();
  let outcome: { value?: T; error?: unknown } | undefined;
  promise.then(
    (value) => (outcome = { value }),
    (error: unknown) => (outcome = { error }),
  );
  await waitFor(() => outcome !== undefined, { timeoutMs, what: "the call to settle instead of hanging" });
  return { ...outcome!, elapsedMs: Date.now() - started };
}

describe("a silently dead network path", () => {
  let proxy: BlackholeProxy;
  let sandbox: Sandbox;
  beforeAll(async () => {
    proxy = await startBlackholeProxy({ host: "127.0.0.1", port: t.server.port });
  });
  afterAll(async () => {
    await sandbox?.close({ killProcesses: false });
    await proxy.close();
  });

  it("exec() fails with UNAVAILABLE within the bound", async () => {
    sandbox = await connect({ baseUrl: proxy.url, pingIntervalMs, pingTimeoutMs });
    const marker = sleepMarker();
    const running = sandbox.exec(`sleep ${marker}`);
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep" });
    proxy.blackhole();
    const { error, elapsedMs } = await settlesWithin(running, boundMs);
    expect(error).toBeInstanceOf(SandboxError);
    expect(error).toMatchObject({ code: "UNAVAILABLE" });
    expect(elapsedMs).toBeGreaterThanOrEqual(pingTimeoutMs);
    console.log(`dead path: exec() failed ${elapsedMs} ms after the path went silent`);
    for (const pid of sleepers(marker)) process.kill(pid, "SIGKILL");
  });

  it("a unary call on a connection that went dead while idle fails within the bound, and the sandbox goes to error", async () => {
    const idle = await startBlackholeProxy({ host: "127.0.0.1", port: t.server.port });
    const own = await connect({ baseUrl: idle.url, pingIntervalMs, pingTimeoutMs });
    try {
      idle.blackhole();
      const { error } = await settlesWithin(own.listProcesses(), boundMs);
      expect(error).toMatchObject({ name: "SandboxError", code: "UNAVAILABLE" });
      expect(own.status).toBe("error");
    } finally {
      await own.close();
      await idle.close();
    }
  });
});

describe("the connection given up", () => {
  it("does not crash the process when a call comes the moment it is given up", async () => {
    // connect-node destroys a session whose PING went unanswered with an error that Node emits
    // only once the socket has closed; a call made before that replaces the session and takes
    // connect-node's error listener off it. The client keeps one of its own on every session.
    const proxy = await startBlackholeProxy({ host: "127.0.0.1", port: t.server.port });
    const connection = createSandboxConnection({ baseUrl: proxy.url, pingIntervalMs, pingTimeoutMs });
    const client = createClient(SandboxService, connection.transport);
    const marker = sleepMarker();
    try {
      const events = client.exec({ spec: { command: `sleep ${marker}` } })[Symbol.asyncIterator]();
      await events.next();
      proxy.blackhole();
      await expect(events.next()).rejects.toMatchObject({ code: Code.Unavailable });
      // At once, before the dead session's error is emitted.
      await expect(client.listProcesses({})).rejects.toMatchObject({ name: "ConnectError" });
    } finally {
      connection.close();
      await proxy.close();
      for (const pid of sleepers(marker)) process.kill(pid, "SIGKILL");
    }
  });
});

describe("a following handle on a path that dies while new connections work", () => {
  it("reconnects within the bound and the result has every byte", async () => {
    const proxy = await startBlackholeProxy({ host: "127.0.0.1", port: t.server.port });
    const sandbox = await connect({
      baseUrl: proxy.url,
      pingIntervalMs,
      pingTimeoutMs,
      reconnect: { backoffBaseMs: 20 },
    });
    try {
      const handle = await sandbox.startProcess("echo first; sleep 1.5; echo second");
      const waiting = handle.wait();
      await waitFor(() => handle.lastStdoutOffset > 0, { what: "the first line" });
      proxy.blackhole({ openOnly: true });
      const silentAt = Date.now();
      const { value, error } = await settlesWithin(waiting, boundMs + 1500);
      console.log(
        `dead path: the handle reconnected (${handle.autoReconnects}) and finished ${Date.now() - silentAt} ms after the path went silent`,
      );
      expect(error).toBeUndefined();
      expect(value?.stdout()).toBe("first\nsecond\n");
      expect(handle.autoReconnects).toBeGreaterThanOrEqual(1);
      expect(proxy.connections).toBeGreaterThanOrEqual(2);
    } finally {
      await sandbox.close();
      await proxy.close();
    }
  });

  it("wait() on a path that stays dead fails within a bound instead of hanging", async () => {
    const proxy = await startBlackholeProxy({ host: "127.0.0.1", port: t.server.port });
    const sandbox = await connect({
      baseUrl: proxy.url,
      pingIntervalMs,
      pingTimeoutMs,
      reconnect: { maxAttempts: 2, backoffBaseMs: 20 },
    });
    const marker = sleepMarker();
    try {
      const handle = await sandbox.startProcess(`echo up; sleep ${marker}`);
      const waiting = handle.wait();
      await waitFor(() => handle.lastStdoutOffset > 0, { what: "the first line" });
      proxy.blackhole();
      // Each attempt takes at most a PING interval and timeout; two reconnects plus the first call.
      const { error, elapsedMs } = await settlesWithin(waiting, 3 * boundMs);
      console.log(`dead path: wait() gave up ${elapsedMs} ms after the path went silent`);
      expect(error).toMatchObject({ name: "SandboxError", code: "UNAVAILABLE" });
      expect(handle.autoReconnects).toBe(2);
    } finally {
      await sandbox.close({ killProcesses: false });
      await proxy.close();
      for (const pid of sleepers(marker)) process.kill(pid, "SIGKILL");
    }
  });
});
