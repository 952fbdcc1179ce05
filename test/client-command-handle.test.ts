import { reapOrphans } from "../src/process/index.js";
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import {
  backoffDelay,
  classifyFailure,
  CommandHandle,
  defaultReconnectSettings,
  connect,
  OutputLostError,
  ProcessNotFoundError,
  ProcessNotRunningError,
  SandboxError,
  StdinNotOpenError,
  type OutputChunk,
  type Sandbox,
} from "../src/client/index.js";
import { waitFor } from "./support/processes.js";
import { Code, deterministicBytesCommand, deterministicBytesSha256, sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { startHttp2Proxy } from "./support/http2-proxy.js";
import { startTcpProxy, type TcpProxy } from "./support/tcp-proxy.js";
import { ConnectError } from "@connectrpc/connect";

const largeOutputBytes = 48 * 1024 * 1024;

let t: TestServer;
let proxy: TcpProxy;
let sandbox: Sandbox;
const saved = {
  max: CommandHandle.MAX_AUTO_RECONNECTS,
  base: CommandHandle.BACKOFF_BASE,
  cap: CommandHandle.BACKOFF_MAX,
};
beforeAll(async () => {
  // Retains all of the large output, so a reader that is away while the proxy is cut never meets a gap.
  t = await startTestServer({ outputCapacityBytes: largeOutputBytes + 16 * 1024 * 1024 });
  proxy = await startTcpProxy({ host: "127.0.0.1", port: t.server.port });
  sandbox = await connect({ baseUrl: proxy.url, workspace: [t.workspace], acceptCompression: false });
});
afterEach(() => {
  CommandHandle.MAX_AUTO_RECONNECTS = saved.max;
  CommandHandle.BACKOFF_BASE = saved.base;
  CommandHandle.BACKOFF_MAX = saved.cap;
  proxy.refuse(false);
});
afterAll(async () => {
  await sandbox.close();
  await proxy.close();
  await t.close();
});

/** Checks that each stream's chunks are contiguous from 0 and returns their bytes. */
function joinChecked(chunks: readonly OutputChunk[], stream: "stdout" | "stderr"): Buffer {
  let next = 0;
  const parts: Uint8Array[] = [];
  for (const chunk of chunks) {
    if (chunk.stream !== stream) continue;
    expect(chunk.offset).toBe(next);
    next += chunk.data.length;
    parts.push(chunk.data);
  }
  return Buffer.concat(parts);
}

describe("CommandHandle (seed 001)", () => {
  it("runs `make build` without waiting, streams chunks and gives the result, as the seed's example", async () => {
    writeFileSync(
      path.join(t.workspace, "Makefile"),
      "build:\n\t@echo compiling; sleep 0.05\n\t@echo warning: careful >&2; sleep 0.05\n\t@echo linked\n",
    );
    // As in the LangSmith example, `timeout` is in seconds: 600 s, not 600 ms.
    const handle = await sandbox.run("make build", { timeout: 600, wait: false });
    expect(handle.commandId).toBe(handle.id);
    expect(handle.pid).toBeGreaterThan(0);
    const written: Uint8Array[] = [];
    const chunks: OutputChunk[] = [];
    for await (const chunk of handle) {
      // auto-reconnects on transient errors
      written.push(chunk.data);
      chunks.push(chunk);
    }
    const result = await handle.result;
    expect(result.exitCode).toBe(0);
    expect(joinChecked(chunks, "stdout").toString()).toBe("compiling\nlinked\n");
    expect(joinChecked(chunks, "stderr").toString()).toBe("warning: careful\n");
    expect(result.output()).toBe("compiling\nwarning: careful\nlinked\n");
    expect(handle.lastStdoutOffset).toBe(17);
    expect(handle.lastStderrOffset).toBe(17);
    expect(handle.status).toBe("completed");
  });

  it("lets a late iterator replay what was received, and several iterators see the same chunks", async () => {
    const handle = await sandbox.run("for i in 1 2 3; do echo $i; sleep 0.05; done", { wait: false });
    const first: string[] = [];
    const second: string[] = [];
    await Promise.all([
      (async () => {
        for await (const chunk of handle) first.push(Buffer.from(chunk.data).toString());
      })(),
      (async () => {
        // Late: only once the first iterator has had a chunk.
        await waitFor(() => first.length > 0, { what: "the first iterator's first chunk" });
        for await (const chunk of handle) second.push(Buffer.from(chunk.data).toString());
      })(),
    ]);
    expect(first.join("")).toBe("1\n2\n3\n");
    expect(second).toEqual(first);
    const after: string[] = [];
    for await (const chunk of handle) after.push(Buffer.from(chunk.data).toString());
    expect(after).toEqual(first);
  });

  it("an iterator that leaves while still replaying releases the stream: the result arrives with every byte", async () => {
    const mib = 1024 * 1024;
    let received = 0;
    const handle = await sandbox.run(`head -c ${mib} /dev/zero; sleep 0.3; head -c ${6 * mib} /dev/zero`, {
      wait: false,
      onOutput: (_stream, data) => (received += data.length),
    });
    await waitFor(() => received >= mib, { what: "the first MiB" });
    const iterator = handle[Symbol.asyncIterator]();
    // The first replayed chunk subscribes the iterator; its queue then fills (4 MiB) and holds the stream back.
    expect((await iterator.next()).done).toBe(false);
    await waitFor(() => received >= 5 * mib, { what: "the iterator's queue to fill" });
    await iterator.return(undefined);
    const result = await handle.wait({ timeoutMs: 10_000 });
    expect(result.exitCode).toBe(0);
    expect(result.stdoutBytes().length).toBe(7 * mib);
  });

  it("maxRetainedBytes bounds what a background handle keeps: the result holds the tail and says it was truncated", async () => {
    const kib = 1024;
    const limit = 64 * kib;
    const printed = 2 * 1024 * kib;
    const handle = await sandbox.startProcess(`head -c ${printed} /dev/zero | tr '\\0' x; echo; echo the end`, {
      maxRetainedBytes: limit,
    });
    let seen = 0;
    for await (const chunk of handle) seen += chunk.data.length;
    const total = printed + "\nthe end\n".length;
    // Iterators still see every byte; only what is kept for the result is bounded.
    expect(seen).toBe(total);
    const result = await handle.wait();
    expect(result.truncated).toBe(true);
    // Exactly the last `limit` bytes, whatever the size of the messages they came in (up to 1 MiB).
    const kept = result.stdoutBytes().length;
    expect(kept).toBe(limit);
    expect(result.droppedBytes).toEqual({ stdout: total - kept, stderr: 0 });
    // The kept tail reaches back into the x's.
    const text = result.stdout();
    expect(text.endsWith("\nthe end\n")).toBe(true);
    expect(text.slice(0, -"\nthe end\n".length)).toMatch(/^x*$/);
    // A late iterator replays only what is still kept, contiguous up to the end.
    let next = total - kept;
    for await (const chunk of handle) {
      expect(chunk.offset).toBe(next);
      next += chunk.data.length;
    }
    expect(next).toBe(total);

    // Exec keeps everything by default, and a background handle within its limit is not truncated.
    const exec = await sandbox.run(`head -c ${printed} /dev/zero`);
    expect(exec.truncated).toBe(false);
    expect(exec.stdoutBytes().length).toBe(printed);
    const small = await (await sandbox.startProcess("echo small")).wait();
    expect(small.truncated).toBe(false);
    expect(small.stdout()).toBe("small\n");
  });

  it("reconnect() keeps the limit: the resumed result stays within maxRetainedBytes", async () => {
    const handle = await sandbox.startProcess("for i in $(seq 1 200); do echo line $i; sleep 0.002; done", {
      maxRetainedBytes: 100,
    });
    const iterator = handle[Symbol.asyncIterator]();
    await waitFor(
      async () => {
        await iterator.next();
        return handle.lastStdoutOffset > 200;
      },
      { what: "some output" },
    );
    await iterator.return(undefined);
    const result = await (await handle.reconnect()).wait();
    expect(result.truncated).toBe(true);
    expect(result.stdoutBytes().length).toBeLessThanOrEqual(100);
    expect(result.stdout().endsWith("line 200\n")).toBe(true);
    const printed = Array.from({ length: 200 }, (_, i) => `line ${i + 1}\n`).join("").length;
    // What the first handle dropped is carried over: dropped + kept accounts for every byte.
    expect(result.droppedBytes.stdout + result.stdoutBytes().length).toBe(printed);
  });

  // LangSmith's CommandHandle.kill() is SIGKILL; the Cloudflare Process's and Vercel Command's are SIGTERM.
  for (const [api, start, signal, exitCode] of [
    [
      "run({ wait: false })'s CommandHandle",
      (command: string) => sandbox.run(command, { wait: false }),
      "SIGKILL",
      137,
    ],
    ["startProcess()'s handle", (command: string) => sandbox.startProcess(command), "SIGTERM", 143],
  ] as const) {
    it(`kill() of ${api} sends ${signal} to the process group by default; the stream ends with the exit and no process is left`, async () => {
      const marker = sleepMarker();
      const handle = await start(`sleep ${marker} & sleep ${marker}; wait`);
      await waitFor(() => sleepers(marker).length === 2, { what: "both sleeps" });
      await handle.kill();
      const result = await handle.wait();
      expect(result.signal).toBe(signal);
      expect(result.exitCode).toBe(exitCode);
      expect(result.status).toBe("killed");
      expect(result.cause).toBe("killed_on_request");
      expect(result.exit.killOrigin).toBe("kill_process");
      await waitFor(() => sleepers(marker).length === 0, { what: "the group to be gone" });
    });
  }

  it("a CommandHandle's kill() and sendInput() may go unawaited, as LangSmith's return nothing: a failure is no unhandled rejection", async () => {
    const handle = await sandbox.run("true", { wait: false });
    await handle.wait();
    // The process has exited: both calls fail, and nobody awaits them.
    void handle.sendInput("x");
    void handle.kill();
    await expect(handle.sendInput("y")).rejects.toBeInstanceOf(SandboxError);
  });

  it("sendInput, resize and closeInput go to a PTY over one input stream", async () => {
    const handle = await sandbox.startProcess('stty -echo; read line; stty size; echo "got $line"; cat', {
      pty: { cols: 80, rows: 24 },
    });
    expect((await handle.resize(120, 40)).closed).toBe(false);
    await handle.sendInput("hello\n");
    await handle.sendInput("tail\n");
    const ack = await handle.closeInput();
    expect(ack.closed).toBe(true);
    const result = await handle.wait();
    expect(result.stdout().replaceAll("\r\n", "\n")).toContain("40 120\ngot hello\ntail\n");
  });

  it("sendInput to a process without stdin is StdinNotOpenError, to one that exited ProcessNotRunningError", async () => {
    const marker = sleepMarker();
    const handle = await sandbox.startProcess(`sleep ${marker}`);
    const error = await handle.sendInput("x").catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(StdinNotOpenError);
    expect(error).toMatchObject({ code: "FAILED_PRECONDITION", reason: "STDIN_NOT_OPEN", processId: handle.id });
    await handle.kill("SIGKILL");
    await handle.wait();
    const exited = await sandbox.startProcess("true", { stdin: true });
    await exited.wait();
    const late = await exited.sendInput("x").catch((failure: unknown) => failure);
    expect(late).toBeInstanceOf(ProcessNotRunningError);
    expect(late).toMatchObject({ reason: "PROCESS_NOT_RUNNING", processId: exited.id });
  });

  it("reconnect() returns a handle that resumes exactly at the last offsets, with the earlier output in its result", async () => {
    const handle = await sandbox.run("for i in $(seq 1 20); do echo line $i; echo err $i >&2; sleep 0.02; done", {
      wait: false,
    });
    const before: OutputChunk[] = [];
    for await (const chunk of handle) {
      before.push(chunk);
      if (before.length >= 6) break;
    }
    const offsets = { stdout: handle.lastStdoutOffset, stderr: handle.lastStderrOffset };
    expect(offsets.stdout).toBeGreaterThan(0);
    const resumed = await handle.reconnect();
    expect(resumed.id).toBe(handle.id);
    const after: OutputChunk[] = [];
    for await (const chunk of resumed) after.push(chunk);
    const result = await resumed.result;
    const expectedStdout = Array.from({ length: 20 }, (_, i) => `line ${i + 1}\n`).join("");
    const expectedStderr = Array.from({ length: 20 }, (_, i) => `err ${i + 1}\n`).join("");
    expect(result.stdout()).toBe(expectedStdout);
    expect(result.stderr()).toBe(expectedStderr);
    // The resumed handle's chunks start exactly where the first left off: nothing replayed, nothing skipped.
    expect(after.find((chunk) => chunk.stream === "stdout")?.offset).toBe(offsets.stdout);
    expect(after.find((chunk) => chunk.stream === "stderr")?.offset).toBe(offsets.stderr);
    expect(joinChecked([...before, ...after], "stdout").toString()).toBe(expectedStdout);
    expect(joinChecked([...before, ...after], "stderr").toString()).toBe(expectedStderr);
  });

  it("reconnect() resumes where the loop left off, though the handle received more after it", async () => {
    // The handle goes on receiving for its result after the loop leaves; the user saw only "one".
    // Each line waits for a line of input, so the order is the test's and not the machine's speed.
    let received = "";
    const handle = await sandbox.startProcess("echo one; read a; echo two; read b; echo three", {
      stdin: true,
      onOutput: (_stream, data) => (received += data),
    });
    for await (const chunk of handle) {
      expect(Buffer.from(chunk.data).toString()).toBe("one\n");
      break;
    }
    expect(handle.lastStdoutOffset).toBe(4);
    await handle.sendInput("\n");
    await waitFor(() => received === "one\ntwo\n", { what: "the handle to receive the second line" });
    // Still where the user is, not where the handle's stream is.
    expect(handle.lastStdoutOffset).toBe(4);
    const resumed = await handle.reconnect();
    const after: OutputChunk[] = [];
    const iterating = (async () => {
      for await (const chunk of resumed) after.push(chunk);
    })();
    await waitFor(() => after.length > 0, { what: "the resumed handle's first chunk" });
    expect(after[0]).toMatchObject({ stream: "stdout", offset: 4 });
    expect(Buffer.from(after[0].data).toString()).toBe("two\n");
    await resumed.sendInput("\n");
    await iterating;
    expect(Buffer.concat(after.map((chunk) => chunk.data)).toString()).toBe("two\nthree\n");
    expect(after.at(-1)?.offset).toBe(8);
    // The result holds each byte once: the first handle's part below offset 4, the rest received again.
    expect((await resumed.result).stdout()).toBe("one\ntwo\nthree\n");
    expect(resumed.lastStdoutOffset).toBe(14);
  });

  for (const protocol of ["grpc", "connect"] as const) {
    it(`auto-reconnects through a proxy cut many times during ${largeOutputBytes / 1024 / 1024} MiB: sha256 of received == printed (${protocol})`, async () => {
      CommandHandle.BACKOFF_BASE = 20;
      const client =
        protocol === "grpc" ? sandbox : await connect({ baseUrl: proxy.url, protocol, acceptCompression: false });
      const handle = await client.run(`${deterministicBytesCommand(largeOutputBytes)}; echo done >&2`, { wait: false });
      const hash = createHash("sha256");
      let received = 0;
      let stderr = "";
      // Cut by the data, not the clock, so a fast machine cuts as often as a slow one: after every
      // 3 MiB read, the next time a connection is up to be cut.
      const cutEveryBytes = 3 * 1024 * 1024;
      let nextCut = cutEveryBytes;
      let cuts = 0;
      for await (const chunk of handle) {
        if (chunk.stream === "stdout") {
          hash.update(chunk.data);
          received += chunk.data.length;
        } else stderr += Buffer.from(chunk.data).toString();
        if (received >= nextCut && received < largeOutputBytes && proxy.cut() > 0) {
          cuts++;
          nextCut = received + cutEveryBytes;
        }
      }
      const result = await handle.result;
      expect(result.exitCode).toBe(0);
      expect(received).toBe(largeOutputBytes);
      expect(hash.digest("hex")).toBe(deterministicBytesSha256(largeOutputBytes));
      expect(stderr).toBe("done\n");
      expect(handle.lastStdoutOffset).toBe(largeOutputBytes);
      expect(cuts).toBeGreaterThanOrEqual(10);
      // A cut reconnects unless the stream had already ended: the client reads ahead (messages of up to
      // 1 MiB, windows of 4 MiB), so the last cut or two may come while it still hands over bytes it has.
      expect(handle.autoReconnects).toBeGreaterThanOrEqual(cuts - 2);
      console.log(`reconnect (${protocol}): ${handle.autoReconnects} reconnects, ${received} bytes verified by sha256`);
      if (client !== sandbox) await client.close();
    });
  }

  it("a lasting failure ends in a SandboxError after MAX_AUTO_RECONNECTS attempts, never a hang", async () => {
    CommandHandle.MAX_AUTO_RECONNECTS = 3;
    CommandHandle.BACKOFF_BASE = 10;
    const marker = sleepMarker();
    const handle = await sandbox.run(`echo up; sleep ${marker}`, { wait: false });
    for await (const chunk of handle) {
      expect(Buffer.from(chunk.data).toString()).toBe("up\n");
      break;
    }
    const waiting = handle.wait();
    proxy.refuse(true);
    proxy.cut();
    const error = await waiting.catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(SandboxError);
    expect((error as SandboxError).code).toBe("UNAVAILABLE");
    expect((error as SandboxError).message).toMatch(/gave up after 3 reconnect attempts/);
    expect(handle.autoReconnects).toBe(3);
    proxy.refuse(false);
    // The process is untouched; a manual reconnect later picks it up again.
    const again = await handle.reconnect();
    await again.kill("SIGKILL");
    expect((await again.wait()).exitCode).toBe(137);
    expect(sleepers(marker)).toEqual([]);
  });

  it("a sandbox's own reconnect settings win over the statics, for all its handles, and reach no other sandbox", async () => {
    CommandHandle.MAX_AUTO_RECONNECTS = 3;
    CommandHandle.BACKOFF_BASE = 10;
    const own = await connect({ baseUrl: proxy.url, reconnect: { maxAttempts: 1, backoffBaseMs: 10 } });
    const marker = sleepMarker();
    try {
      const shared = await sandbox.run(`echo up; sleep ${marker}`, { wait: false });
      const ownRun = await own.run(`echo up; sleep ${marker}`, { wait: false });
      const ownProcess = await own.startProcess(`echo up; sleep ${marker}`);
      const handles = [shared, ownRun, ownProcess];
      const waiting = handles.map((handle) => handle.wait().catch((failure: unknown) => failure));
      await waitFor(() => handles.every((handle) => handle.lastStdoutOffset > 0), { what: "every first line" });
      proxy.refuse(true);
      proxy.cut();
      const errors = await Promise.all(waiting);
      for (const error of errors) expect(error).toMatchObject({ name: "SandboxError", code: "UNAVAILABLE" });
      expect(handles.map((handle) => handle.autoReconnects)).toEqual([3, 1, 1]);
    } finally {
      proxy.refuse(false);
      await own.close({ killProcesses: false });
      for (const pid of sleepers(marker)) process.kill(pid, "SIGKILL");
    }
  });

  it("never reconnects after kill()", async () => {
    const marker = sleepMarker();
    // Ignores SIGTERM and is never escalated, so it is still running when the connection breaks.
    const handle = await sandbox.run(`trap '' TERM; echo up; sleep ${marker}`, { wait: false });
    for await (const _ of handle) break;
    await handle.kill("SIGTERM", { gracePeriodMs: -1 });
    const waiting = handle.wait();
    proxy.cut();
    await expect(waiting).rejects.toBeInstanceOf(SandboxError);
    expect(handle.autoReconnects).toBe(0);
    await sandbox.killProcess(handle.id, "SIGKILL");
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be gone" });
  });

  it("a cut Exec call is a SandboxError (UNAVAILABLE) and the daemon kills the command", async () => {
    const marker = sleepMarker();
    const running = sandbox.exec(`echo up; sleep ${marker}`);
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep" });
    proxy.cut();
    await expect(running).rejects.toMatchObject({ name: "SandboxError", code: "UNAVAILABLE" });
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be killed" });
  });

  it("output the daemon dropped is an OutputLostError; reconnect() then continues after the gap", async () => {
    const small = await startTestServer({ outputCapacityBytes: 64 * 1024 });
    const client = await connect({ baseUrl: small.server.url });
    try {
      // Started and finished before anyone follows it, so the daemon has certainly dropped the head.
      await small.client.startProcess({
        spec: { command: "head -c 200000 /dev/zero | tr '\\0' a; echo tail", processId: "lossy", autoCleanup: false },
      });
      await waitFor(async () => (await small.client.getProcess({ processId: "lossy" })).process?.exit !== undefined, {
        what: "the printer to exit",
      });
      const handle = await client.attach("lossy");
      await handle.wait().catch(() => {});
      const error = await handle.result.catch((failure: unknown) => failure);
      expect(error).toBeInstanceOf(OutputLostError);
      expect(error).toMatchObject({ code: "OUTPUT_LOST", stream: "stdout" });
      const { offset, missedBytes: lost } = error as OutputLostError;
      expect(lost).toBeGreaterThan(0);
      expect(handle.lastStdoutOffset).toBe(offset + lost);
      const rest = await (await handle.reconnect()).wait();
      expect(lost + rest.stdoutBytes().length).toBe(200_005);
      expect(rest.stdout().endsWith("aaatail\n")).toBe(true);
    } finally {
      await client.close();
      await small.close();
    }
  });

  it("wait() bounds only the wait: a timeout is ExecutionTimeoutError, an abort its reason; the command runs on", async () => {
    const marker = sleepMarker();
    const handle = await sandbox.startProcess(`sleep ${marker}`);
    await expect(handle.wait({ timeoutMs: 50 })).rejects.toMatchObject({
      name: "ExecutionTimeoutError",
      code: "EXECUTION_TIMEOUT",
      timeout: 50,
    });
    await expect(handle.wait({ signal: AbortSignal.abort(new Error("stop waiting")) })).rejects.toThrow("stop waiting");
    expect(await handle.getStatus()).toBe("running");
    await handle.kill("SIGKILL");
    await handle.wait();
    expect(sleepers(marker)).toEqual([]);
  });
});

describe("a daemon going away gracefully", () => {
  for (const protocol of ["grpc", "connect"] as const) {
    it(`resumes at once after a graceful GOAWAY, without the backoff (${protocol})`, async () => {
      const front = await startHttp2Proxy(t.server.url);
      const client = await connect({ baseUrl: front.url, protocol });
      // A backoff this long would fail the test: only the GOAWAY path resumes without one.
      CommandHandle.BACKOFF_BASE = 20_000;
      try {
        const handle = await client.run("for i in $(seq 1 10); do echo tick $i; sleep 0.1; done", { wait: false });
        const lines: string[] = [];
        const started = Date.now();
        let wentAway = false;
        for await (const log of handle.logs()) {
          lines.push(log.data);
          if (!wentAway && lines.join("").includes("tick 3")) {
            wentAway = true;
            await front.goAway();
          }
        }
        expect(lines.join("")).toBe(Array.from({ length: 10 }, (_, i) => `tick ${i + 1}\n`).join(""));
        expect(handle.autoReconnects).toBe(1);
        expect(front.connections).toBe(2);
        expect(Date.now() - started).toBeLessThan(5000);
      } finally {
        await client.close();
        await front.close();
      }
    });
  }
});

describe("a daemon that closes gracefully for a restart", () => {
  /**
   * Follows `command` through a proxy, points the proxy at a second daemon, closes the first and
   * returns how the handle's wait ended, with what it took.
   */
  async function restartUnder(command: string) {
    // As the sandboxd daemon does at start: what its killed commands leave is reaped at once, so a closing
    // daemon does not wait for init to reap them before it lets go of its connections.
    expect(reapOrphans().state).toBe("reaping");
    const before = await startTestServer();
    const after = await startTestServer();
    const front = await startTcpProxy({ host: "127.0.0.1", port: before.server.port });
    const client = await connect({ baseUrl: front.url });
    // A backoff this long would fail the test: only the going-away path reconnects without one.
    CommandHandle.BACKOFF_BASE = 20_000;
    try {
      const handle = await client.run(command, { wait: false });
      // Caught at once: the handle may fail while the old daemon is still closing.
      const waiting = handle.wait().then(
        () => undefined,
        (failure: unknown) => failure,
      );
      await waitFor(() => handle.lastStdoutOffset > 0, { what: "the first line" });
      // The address now leads to the restarted daemon, as a service address does.
      front.retarget({ host: "127.0.0.1", port: after.server.port });
      const closedAt = Date.now();
      const closed = before.close();
      const error = await waiting;
      const waitedMs = Date.now() - closedAt;
      await closed;
      return { error, waitedMs, autoReconnects: handle.autoReconnects, id: handle.id, connections: front.connections };
    } finally {
      await client.close({ killProcesses: false });
      await front.close();
      await after.close();
    }
  }

  it("is reconnected to at once (SHUTTING_DOWN, LangSmith's 1001 Going Away), not after a backoff", async () => {
    const { error, waitedMs, autoReconnects, id, connections } = await restartUnder("echo up; sleep 600");
    // The restarted daemon has no record of the process (a restart ends every command): it says so at once.
    expect(error).toBeInstanceOf(ProcessNotFoundError);
    expect((error as ProcessNotFoundError).processId).toBe(id);
    // At once, and once: the client closes the connection the SHUTTING_DOWN answer came on, so the
    // retry goes to a new connection, never after the 20 s backoff and never in a loop.
    expect(autoReconnects).toBe(1);
    expect(connections).toBe(2);
    expect(waitedMs).toBeLessThan(5000);
  });

  it("is reconnected to once, at once, while the closing daemon waits out a command that ignores SIGTERM", async () => {
    // The daemon's close waits up to its grace period for the command; the call it ends meanwhile
    // must not be retried down the closing connection (a retry there is ended at once, over and over,
    // until the daemon closes that connection).
    const { error, waitedMs, autoReconnects, id } = await restartUnder("trap '' TERM; echo up; sleep 600");
    expect(error).toBeInstanceOf(ProcessNotFoundError);
    expect((error as ProcessNotFoundError).processId).toBe(id);
    expect(autoReconnects).toBe(1);
    // Known before the closing daemon's grace period (2 s) is over.
    expect(waitedMs).toBeLessThan(1500);
  });
});

describe("classifyFailure", () => {
  /** A status as a server sends it: with response metadata (the grpc-status trailer) and, from the daemon, an ErrorInfo. */
  function answered(code: Code, reason?: string): ConnectError {
    const error = new ConnectError("from the server", code, new Headers({ "grpc-status": String(code) }));
    if (reason !== undefined)
      error.details.push({ desc: ErrorInfoSchema, value: { reason, domain: "sandbox.v1", metadata: {} } });
    return error;
  }
  /** An error of the connection: a Node error code under the ConnectError, as connect-node reports it. */
  function broken(code: Code, nodeCode: string): ConnectError {
    return new ConnectError(
      "connection failed",
      code,
      undefined,
      undefined,
      Object.assign(new Error(nodeCode), { code: nodeCode }),
    );
  }

  it("resumes at once when the daemon goes away, backs off on connection failures, gives up on the daemon's refusals", () => {
    // The daemon going away for a restart: its reason, or a graceful GOAWAY under a transient failure.
    expect(classifyFailure(answered(Code.Unavailable, "SHUTTING_DOWN"), false)).toBe("going-away");
    expect(classifyFailure(broken(Code.Aborted, "ECONNRESET"), true)).toBe("going-away");
    // Connection failures, by Node error code or by the codes a transport raises without a server's answer.
    expect(classifyFailure(broken(Code.Internal, "ECONNRESET"), false)).toBe("transient");
    expect(classifyFailure(broken(Code.Unknown, "ERR_HTTP2_STREAM_ERROR"), false)).toBe("transient");
    expect(classifyFailure(new ConnectError("PING timed out", Code.Unavailable), false)).toBe("transient");
    expect(classifyFailure(new ConnectError("any words at all", Code.Canceled), false)).toBe("transient");
    expect(classifyFailure(new ConnectError("any words at all", Code.Internal), false)).toBe("transient");
    expect(classifyFailure(new ConnectError("any words at all", Code.InvalidArgument), false)).toBe("transient");
    // The daemon's answers: never retried, whatever their message says.
    expect(classifyFailure(answered(Code.NotFound, "PROCESS_NOT_FOUND"), true)).toBe("fatal");
    expect(classifyFailure(answered(Code.Internal, "INTERNAL"), false)).toBe("fatal");
    expect(classifyFailure(answered(Code.Internal), false)).toBe("fatal");
    expect(classifyFailure(answered(Code.InvalidArgument), false)).toBe("fatal");
    expect(classifyFailure(answered(Code.Unauthenticated, "UNAUTHENTICATED"), false)).toBe("fatal");
    expect(
      classifyFailure(
        new ConnectError("http/2 stream closed with error code ECONNRESET", Code.PermissionDenied),
        false,
      ),
    ).toBe("fatal");
    // Any other UNAVAILABLE from the daemon is worth another try.
    expect(classifyFailure(answered(Code.Unavailable, "SOMETHING_NEW"), false)).toBe("transient");
  });
});

describe("reconnect backoff", () => {
  it("has equal jitter: each delay lies in the upper half of its doubling ceiling, and delays differ", () => {
    expect(defaultReconnectSettings).toEqual({ maxAttempts: 5, backoffBaseMs: 500, backoffMaxMs: 10_000 });
    expect(backoffDelay(1, () => 0)).toBe(250);
    expect(backoffDelay(1, () => 0.999999)).toBe(500);
    expect(backoffDelay(3, () => 0.5)).toBe(1500);
    expect(backoffDelay(10, () => 0)).toBe(5000);
    for (const attempt of [1, 2, 3, 4, 5, 6]) {
      const ceiling = Math.min(10_000, 500 * 2 ** (attempt - 1));
      const delays = Array.from({ length: 200 }, () => backoffDelay(attempt));
      expect(Math.min(...delays)).toBeGreaterThanOrEqual(ceiling / 2);
      expect(Math.max(...delays)).toBeLessThanOrEqual(ceiling);
      // 200 clients cut off at once do not come back in lockstep.
      expect(new Set(delays).size).toBeGreaterThan(20);
    }
    // Other settings, as a sandbox's `reconnect` option gives them.
    expect(backoffDelay(3, () => 0, { maxAttempts: 5, backoffBaseMs: 100, backoffMaxMs: 300 })).toBe(150);
  });
});
