import http from "node:http";
import net from "node:net";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutputStream, ProcessExitedSchema, ProcessStatus } from "../gen/sandbox/v1/sandbox_pb.js";
import { readListeningSockets } from "../src/process/readiness/index.js";
import { errorInfos, expectReason } from "./support/errors.js";
import { holdsFor, waitFor } from "./support/processes.js";
import { Code, rpcError, sleepMarker } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

// The readiness RPCs against a real daemon on a real port, with real servers started as its processes.
let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

/** A loopback port nobody listens on now (the kernel's pick, released at once). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Starts a background process; returns its id. */
async function start(command: string, processId: string): Promise<string> {
  await t.client.startProcess({ spec: { command, processId } });
  return processId;
}

/** A python3 HTTP server on `port` (127.0.0.1) that starts after `delay` seconds, saying so on stdout first. */
function lateServer(port: number, delay: number): string {
  return `echo "starting in ${delay}s"; sleep ${delay}; exec python3 -u -m http.server ${port} --bind 127.0.0.1`;
}

describe("WaitForPort", () => {
  it("finds a server that binds its port after 1.5 s, by connection and by an HTTP status range", async () => {
    const port = await freePort();
    const processId = await start(lateServer(port, 1.5), "late-server");
    try {
      const ready = await t.client.waitForPort({ port, processId, timeoutMs: 30_000 });
      expect(ready).toMatchObject({ address: `127.0.0.1:${port}`, httpStatus: 0 });
      expect(ready.attempts).toBeGreaterThan(1);
      // The directory listing answers 200; a missing path 404, which a range may accept.
      const ok = await t.client.waitForPort({ port, http: { path: "/" }, timeoutMs: 30_000 });
      expect(ok.httpStatus).toBe(200);
      const missing = await t.client.waitForPort({
        port,
        http: { path: "/missing", minStatus: 404, maxStatus: 404 },
        timeoutMs: 30_000,
      });
      expect(missing.httpStatus).toBe(404);
      // Outside the range it never answers right: the timeout says what the last try found.
      const wrong = await rpcError(
        // Long enough for a probe to be answered on a busy machine (each probe may take up to 2 s).
        t.client.waitForPort({ port, http: { path: "/missing" }, timeoutMs: 5000, processId }),
      );
      expect(Code[wrong.code]).toBe("DeadlineExceeded");
      expect(errorInfos(wrong)[0]?.metadata).toMatchObject({
        last_probe: expect.stringMatching(new RegExp(`^127\\.0\\.0\\.1:${port}: HTTP 404; `)),
        waiting_for: `port ${port} (HTTP /missing)`,
      });
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });

  it("says what the last finished try found when the time limit cuts a try short", async () => {
    // The first request is answered 404, every later one hangs: the try under way at the time limit
    // found nothing, and the one before it found the 404.
    let requests = 0;
    const server = http.createServer((_request, response) => {
      if (requests++ === 0) response.writeHead(404).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as net.AddressInfo;
    try {
      const error = await rpcError(t.client.waitForPort({ port, http: { path: "/" }, timeoutMs: 1200 }));
      expect(Code[error.code]).toBe("DeadlineExceeded");
      expect(requests).toBeGreaterThan(1);
      expect(errorInfos(error)[0]?.metadata.last_probe).toMatch(new RegExp(`^127\\.0\\.0\\.1:${port}: HTTP 404; `));
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("ends at its timeout with DEADLINE_EXCEEDED, the last log lines of a server that never binds and what the last try found", async () => {
    const port = await freePort();
    const processId = await start(
      `for i in 1 2 3; do echo "step $i"; done; echo "warming up" >&2; sleep ${sleepMarker(60)}`,
      "never-binds",
    );
    try {
      await waitFor(async () => (await t.client.getProcess({ processId })).process?.stderrBytes === 11n);
      const error = await rpcError(t.client.waitForPort({ port, processId, timeoutMs: 1500 }));
      expectReason(error, {
        code: Code.DeadlineExceeded,
        reason: "WAIT_TIMED_OUT",
        metadata: {
          process_id: processId,
          timeout_ms: "1500",
          waiting_for: `port ${port}`,
          last_stdout: "step 1\nstep 2\nstep 3",
          last_stderr: "warming up",
          last_probe: errorInfos(error)[0]?.metadata.last_probe ?? "",
        },
        message: `timed out after 1500 ms waiting for port ${port} of process ${processId}`,
      });
      // Both loopback addresses were tried; ::1 may not exist here at all.
      expect(errorInfos(error)[0]?.metadata.last_probe).toMatch(
        new RegExp(
          `^127\\.0\\.0\\.1:${port}: connection refused; \\[::1\\]:${port}: (connection refused|address not available)$`,
        ),
      );
      // The process runs on.
      expect((await t.client.getProcess({ processId })).process?.status).toBe(ProcessStatus.RUNNING);
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });

  it("fails at once with FAILED_PRECONDITION, the exit record and the last lines when the process exits first", async () => {
    const port = await freePort();
    const processId = await start(
      "echo 'loading config'; echo 'error: no config' >&2; sleep 0.5; exit 3",
      "exits-first",
    );
    // A minute's timeout: only the exit can end this within the test's time.
    const error = await rpcError(t.client.waitForPort({ port, processId, timeoutMs: 60_000 }));
    expectReason(error, {
      code: Code.FailedPrecondition,
      reason: "PROCESS_EXITED",
      metadata: {
        process_id: processId,
        waiting_for: `port ${port}`,
        status: "FAILED",
        exit_code: "3",
        signal: "",
        last_stdout: "loading config",
        last_stderr: "error: no config",
      },
      message: `process ${processId} exited before port ${port} (exit code 3)`,
    });
    const [exited] = error.findDetails(ProcessExitedSchema);
    expect(exited).toMatchObject({ status: ProcessStatus.FAILED, exitCode: 3, stdoutBytes: 15n });
    // Waiting again for a process that has exited fails the same way, at once.
    expect(errorInfos(await rpcError(t.client.waitForPort({ port, processId })))[0]?.reason).toBe("PROCESS_EXITED");
  });

  it("stops probing when the client cancels", async () => {
    let requests = 0;
    const server = http.createServer((_, response) => {
      requests++;
      response.writeHead(503).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as net.AddressInfo;
    try {
      const controller = new AbortController();
      const waiting = rpcError(
        t.client.waitForPort(
          { port, host: "127.0.0.1", http: { path: "/health" }, intervalMs: 20 },
          { signal: controller.signal },
        ),
      );
      await waitFor(() => requests >= 3, { what: "the daemon's first probes" });
      controller.abort();
      expect(Code[(await waiting).code]).toBe("Canceled");
      // A probe may have been on its way; after that, none.
      await waitFor(async () => {
        const before = requests;
        await new Promise((resolve) => setTimeout(resolve, 200));
        return requests === before;
      });
      const settled = requests;
      await holdsFor(() => requests === settled, { forMs: 500, what: "no more probes" });
    } finally {
      server.close();
    }
  });

  it("refuses a port out of range, a path without a slash and a bad status range", async () => {
    const invalid = async (request: Parameters<typeof t.client.waitForPort>[0], field: string) =>
      expectReason(await rpcError(t.client.waitForPort(request)), {
        code: Code.InvalidArgument,
        reason: "INVALID_ARGUMENT",
        metadata: { field },
      });
    await invalid({ port: 0 }, "port");
    await invalid({ port: 70_000 }, "port");
    await invalid({ port: 80, http: { path: "health" } }, "http.path");
    await invalid({ port: 80, http: { minStatus: 500, maxStatus: 200 } }, "http");
    await invalid({ port: 80, intervalMs: 5 }, "interval_ms");
    await invalid({ port: 80, intervalMs: 60_001 }, "interval_ms");
    await invalid({ port: 80, timeoutMs: 2 ** 31 }, "timeout_ms");
  });
});

describe("WaitForLog", () => {
  it("matches a line printed before the wait began, with its groups and byte offset", async () => {
    const processId = await start(
      `echo 'booting'; echo 'listening on port 4321'; sleep ${sleepMarker(60)}`,
      "printed-before",
    );
    try {
      await waitFor(async () => (await t.client.getProcess({ processId })).process?.stdoutBytes === 31n);
      const found = await t.client.waitForLog({ processId, pattern: "port (?<port>\\d+)", timeoutMs: 10_000 });
      expect(found).toMatchObject({
        stream: OutputStream.STDOUT,
        line: "listening on port 4321",
        lineOffset: 8n,
        offset: 8n + 13n,
        match: "port 4321",
        namedGroups: { port: "4321" },
      });
      expect(found.groups.map((group) => group.text)).toEqual(["4321"]);
      // From an offset past that line, the retained output no longer holds it: the wait times out.
      const later = await rpcError(
        t.client.waitForLog({ processId, pattern: "port", stdoutOffset: 31n, timeoutMs: 300 }),
      );
      expect(errorInfos(later)[0]).toMatchObject({ reason: "WAIT_TIMED_OUT" });
      expect(errorInfos(later)[0]?.metadata).toMatchObject({
        waiting_for: "log /port/",
        last_stdout: "booting\nlistening on port 4321",
      });
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });

  it("finds a match split across two writes, as the whole line, on the stream asked for", async () => {
    const processId = await start(
      "printf 'ready on po' >&2; printf 'noise\\n'; sleep 0.5; printf 'rt 8080\\nafter\\n' >&2; sleep 30",
      "split-write",
    );
    try {
      const found = await t.client.waitForLog({
        processId,
        pattern: "^ready on port (\\d+)$",
        stream: OutputStream.STDERR,
        timeoutMs: 20_000,
      });
      expect(found).toMatchObject({ stream: OutputStream.STDERR, offset: 0n, line: "ready on port 8080" });
      expect(found.groups.map((group) => group.text)).toEqual(["8080"]);
      // Only stdout: the line is not there.
      const elsewhere = await rpcError(
        t.client.waitForLog({ processId, pattern: "ready", stream: OutputStream.STDOUT, timeoutMs: 300 }),
      );
      expect(errorInfos(elsewhere)[0]?.reason).toBe("WAIT_TIMED_OUT");
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });

  it("fails at once when the output ends without a match, matching the last line without a newline first", async () => {
    const processId = await start("echo 'compiling'; printf 'fatal: out of cheese' >&2; exit 2", "no-match");
    const error = await rpcError(t.client.waitForLog({ processId, pattern: "listening", timeoutMs: 60_000 }));
    expectReason(error, {
      code: Code.FailedPrecondition,
      reason: "PROCESS_EXITED",
      metadata: {
        process_id: processId,
        waiting_for: "log /listening/",
        status: "FAILED",
        exit_code: "2",
        signal: "",
        last_stdout: "compiling",
        last_stderr: "fatal: out of cheese",
      },
    });
    expect(error.findDetails(ProcessExitedSchema)[0]?.exitCode).toBe(2);
    const last = await t.client.waitForLog({ processId, pattern: "cheese$" });
    expect(last).toMatchObject({ stream: OutputStream.STDERR, line: "fatal: out of cheese", offset: 14n });
  });

  it("refuses a pattern that cannot run in linear time, a bad one and one too long, before waiting", async () => {
    const processId = await start(`sleep ${sleepMarker(30)}`, "bad-patterns");
    try {
      expectReason(await rpcError(t.client.waitForLog({ processId, pattern: "(a)\\1" })), {
        code: Code.InvalidArgument,
        reason: "PATTERN_INVALID",
        metadata: { field: "pattern", error: "Cannot be executed in linear time" },
      });
      const unclosed = await rpcError(t.client.waitForLog({ processId, pattern: "(" }));
      expect(errorInfos(unclosed)[0]).toMatchObject({ reason: "PATTERN_INVALID" });
      const long = await rpcError(t.client.waitForLog({ processId, pattern: "a".repeat(5000) }));
      expect(errorInfos(long)[0]?.metadata).toMatchObject({ limit: "4096" });
      expectReason(await rpcError(t.client.waitForLog({ processId: "nobody", pattern: "a" })), {
        code: Code.NotFound,
        reason: "PROCESS_NOT_FOUND",
        metadata: { process_id: "nobody" },
      });
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });
});

describe("a cancelled wait", () => {
  it("ends on the daemon too: WaitForLog and WaitForExit answer CANCELED there as soon as the client goes", async () => {
    const processId = await start(`echo waiting; sleep ${sleepMarker(60)}`, "cancelled-waits");
    const endedOnDaemon = async (procedure: string) => {
      const metrics = await (await fetch(`${t.server.url}/metrics`)).text();
      const line = new RegExp(
        `^sandboxd_calls_total\\{procedure="sandbox\\.v1\\.SandboxService/${procedure}",code="canceled"\\} 1$`,
        "m",
      );
      return line.test(metrics);
    };
    try {
      for (const [procedure, call] of [
        ["WaitForLog", (signal: AbortSignal) => t.client.waitForLog({ processId, pattern: "never" }, { signal })],
        ["WaitForExit", (signal: AbortSignal) => t.client.waitForExit({ processId }, { signal })],
      ] as const) {
        const controller = new AbortController();
        const waiting = rpcError(call(controller.signal));
        // Neither ends by itself: no timeout, and the process runs for a minute.
        await holdsFor(async () => !(await endedOnDaemon(procedure)), { forMs: 300, what: `${procedure} waiting` });
        controller.abort();
        expect(Code[(await waiting).code]).toBe("Canceled");
        await waitFor(() => endedOnDaemon(procedure), { what: `${procedure} to end on the daemon` });
      }
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });
});

describe("output kept as a head and a tail", () => {
  it("is searched across the gap between them: a line of the head and one of the tail are found, none made of both", async () => {
    const { process } = await t.client.startProcess({
      spec: {
        command:
          "echo 'build started'; seq 1 100000; printf 'half a '; seq 1 100000 | tr -d '\\n'; echo; echo 'build failed at step 7'",
        processId: "head-and-tail",
        retention: { headBytes: 4096n, tailBytes: 16_384n },
      },
    });
    const processId = process!.processId;
    await t.client.waitForExit({ processId, timeoutMs: 30_000 });
    const retained = await t.client.getProcessLogs({ processId });
    expect(retained.stdoutOffset).toBeGreaterThan(4096n);
    expect((await t.client.waitForLog({ processId, pattern: "^build (started)$" })).lineOffset).toBe(0n);
    const failed = await t.client.waitForLog({ processId, pattern: "failed at step (\\d+)" });
    expect(failed.groups.map((group) => group.text)).toEqual(["7"]);
    // "half a " went with the gap: what follows it in the tail is no line starting with it.
    const error = await rpcError(t.client.waitForLog({ processId, pattern: "^half a 1" }));
    expect(errorInfos(error)[0]).toMatchObject({ reason: "PROCESS_EXITED" });
  });
});

describe("a terminal's output", () => {
  it("is matched and reported as lines, without the carriage returns a PTY adds", async () => {
    const { process } = await t.client.startProcess({
      spec: { command: "echo 'ready on tty'; echo 'still here'; sleep 0.3; exit 9", processId: "tty-lines", pty: {} },
    });
    expect((await t.client.waitForLog({ processId: process!.processId, pattern: "^ready on (\\w+)$" })).line).toBe(
      "ready on tty",
    );
    const error = await rpcError(t.client.waitForLog({ processId: "tty-lines", pattern: "never", timeoutMs: 60_000 }));
    expect(errorInfos(error)[0]?.metadata).toMatchObject({ last_stdout: "ready on tty\nstill here", exit_code: "9" });
  });
});

describe("WaitForExit", () => {
  it("returns the exit record, and times out with the last lines while the process runs on", async () => {
    const processId = await start("echo working; sleep 3; exit 7", "exit-seven");
    // The line first: on a busy machine the shell may not have printed it within the 200 ms wait.
    await t.client.waitForLog({ processId, pattern: "working", timeoutMs: 30_000 });
    const early = await rpcError(t.client.waitForExit({ processId, timeoutMs: 200 }));
    expect(errorInfos(early)[0]).toMatchObject({
      reason: "WAIT_TIMED_OUT",
      metadata: { process_id: processId, timeout_ms: "200", waiting_for: "exit", last_stdout: "working" },
    });
    const { exited, process } = await t.client.waitForExit({ processId, timeoutMs: 30_000 });
    expect(exited).toMatchObject({ status: ProcessStatus.FAILED, exitCode: 7, stdoutBytes: 8n });
    expect(process?.processId).toBe(processId);
  });
});

describe("ListPorts", () => {
  it("lists a server's port with its pid, program and the id of the process whose tree holds it", async () => {
    const port = await freePort();
    // Not exec'd: python is a child of the shell, found through its parent.
    const processId = await start(`python3 -u -m http.server ${port} --bind 127.0.0.1; true`, "listed-server");
    try {
      await t.client.waitForPort({ port, processId, timeoutMs: 30_000 });
      const { ports } = await t.client.listPorts({});
      const entry = ports.find((listed) => listed.port === port);
      expect(entry).toMatchObject({ address: "127.0.0.1", ipv6: false, processId, program: "python3" });
      expect(readFileSync(`/proc/${entry!.pid}/cmdline`, "utf8")).toContain("http.server");
      // Ports of one process only; the test's own listeners are not among them.
      const { ports: own } = await t.client.listPorts({ processId });
      expect(own.map((listed) => listed.port)).toEqual([port]);
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });

  it("names the process of a double-forked server that left its command's group, session and parent, through the command's cgroup", async () => {
    const port = await freePort();
    // The subshell exits at once: python is re-parented to the reaper, in a session of its own.
    const processId = await start(
      `(setsid python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 < /dev/null &); sleep ${sleepMarker(60)}`,
      "double-forked",
    );
    let serverPid = 0;
    try {
      await t.client.waitForPort({ port, timeoutMs: 30_000 });
      const leader = (await t.client.getProcess({ processId })).process!.pid;
      const entry = (await t.client.listPorts({})).ports.find((listed) => listed.port === port);
      serverPid = entry?.pid ?? 0;
      expect(readFileSync(`/proc/${serverPid}/stat`, "utf8")).not.toContain(` ${leader} `);
      // Only a cgroup of the command's own (writable cgroups) can tell; without one the daemon says it does not know.
      const perCommandCgroup =
        readFileSync(`/proc/${leader}/cgroup`, "utf8") !== readFileSync("/proc/self/cgroup", "utf8");
      expect(entry?.processId).toBe(perCommandCgroup ? processId : "");
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
      if (serverPid > 0) process.kill(serverPid, "SIGKILL");
    }
  });

  it("reads the kernel's socket tables, and says PORTS_UNAVAILABLE where there are none", () => {
    expect(readListeningSockets().length).toBeGreaterThan(0);
    let reason: string | undefined;
    try {
      readListeningSockets("/nonexistent");
    } catch (error) {
      reason = (error as { reason?: string }).reason;
    }
    expect(reason).toBe("PORTS_UNAVAILABLE");
  });
});
