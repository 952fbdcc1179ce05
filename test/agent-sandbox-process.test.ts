import { mkdirSync, symlinkSync } from "node:fs";
import path from "node:path";
import { Code, type Client } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessService, Signal, type StartResponse } from "../gen/process/v1/process_pb.js";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { maxExecuteOutputBytes, newestThatFit } from "../src/server/agent-sandbox/index.js";
import { expectReason } from "./support/errors.js";
import { groupMembers, isAlive, waitFor } from "./support/processes.js";
import { collectLogs, outputChunks, rpcError, sleepers, sleepMarker, streamError } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const outputLimit = 64 * 1024;
let t: TestServer;
let processes: Client<typeof ProcessService>;
beforeAll(async () => {
  t = await startTestServer({ outputCapacityBytes: outputLimit });
  processes = t.connect(ProcessService);
});
afterAll(async () => {
  await t.close();
});

/** A Start stream read event by event, as a client of process.v1 reads it. */
function startStream(
  request: Parameters<typeof processes.start>[0],
  options: Parameters<typeof processes.start>[1] = {},
) {
  const iterator = processes.start(request, options)[Symbol.asyncIterator]();
  const next = async (): Promise<StartResponse["event"]> => {
    const result = await iterator.next();
    if (result.done) throw new Error("the Start stream ended");
    return result.value.event;
  };
  return {
    /** The process id of the init event, which must come first. */
    async init(): Promise<number> {
      const event = await next();
      if (event.case !== "init") throw new Error(`first event is ${event.case}, not init`);
      return event.value.processId;
    },
    /** Reads until the exit event: the output of each stream and the exit code; nothing may follow. */
    async drain(): Promise<{ stdout: Buffer; stderr: Buffer; exitCode: number }> {
      const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
      for (;;) {
        const event = await next();
        if (event.case === "stdout" || event.case === "stderr") out[event.case].push(Buffer.from(event.value));
        else if (event.case === "exit") {
          expect((await iterator.next()).done).toBe(true);
          return {
            stdout: Buffer.concat(out.stdout),
            stderr: Buffer.concat(out.stderr),
            exitCode: event.value.exitCode,
          };
        } else throw new Error(`unexpected ${event.case} event`);
      }
    },
    /** Reads stdout until it holds `text`. */
    async stdoutUntil(text: string): Promise<string> {
      let seen = "";
      while (!seen.includes(text)) {
        const event = await next();
        if (event.case === "stdout") seen += Buffer.from(event.value).toString();
        else if (event.case !== "stderr")
          throw new Error(`unexpected ${event.case} event before ${JSON.stringify(text)}`);
      }
      return seen;
    },
    iterator,
  };
}

describe("process.v1 Execute", () => {
  it("answers the exit code and both streams, byte for byte, binary included", async () => {
    const result = await processes.execute({
      config: { command: ["sh", "-c", "printf 'out\\000\\377'; printf err >&2; exit 3"] },
    });
    expect(result.exitCode).toBe(3);
    expect(Buffer.from(result.stdout)).toEqual(Buffer.from([0x6f, 0x75, 0x74, 0x00, 0xff]));
    expect(Buffer.from(result.stderr).toString()).toBe("err");
    const all = await processes.execute({ config: { command: ["head", "-c", "256", "/dev/urandom"] } });
    expect(all.stdout.length).toBe(256);
  });

  it("runs argv as given, never through a shell, with env over the clean base and cwd under the workspace", async () => {
    mkdirSync(path.join(t.workspace, "sub"), { recursive: true });
    const result = await processes.execute({
      config: {
        command: ["sh", "-c", 'printf "%s|%s|%s" "$SANDBOX_TEST_VAR" "$(pwd)" "$SANDBOXD_TOKEN"'],
        envVars: { SANDBOX_TEST_VAR: "sentinel" },
        cwd: "sub",
      },
    });
    expect(Buffer.from(result.stdout).toString()).toBe(`sentinel|${t.workspace}/sub|`);
    // One element with a space is a program of that name: no shell splits it.
    const notShell = await processes.execute({ config: { command: ["echo hi"] } });
    expect(notShell.exitCode).toBe(127);
    expect(Buffer.from(notShell.stderr).toString()).toMatch(/program not found: echo hi/);
    const absolute = await processes.execute({ config: { command: ["pwd"], cwd: path.join(t.workspace, "sub") } });
    expect(Buffer.from(absolute.stdout).toString()).toBe(`${t.workspace}/sub\n`);
  });

  it("refuses a missing command with INVALID_ARGUMENT", async () => {
    for (const config of [undefined, { command: [] }, { command: [""] }]) {
      expectReason(await rpcError(processes.execute({ config })), {
        code: Code.InvalidArgument,
        reason: "INVALID_ARGUMENT",
        metadata: { field: "config.command" },
      });
    }
  });

  it("refuses a cwd outside the workspace with PERMISSION_DENIED: .., an absolute path, a symlink out", async () => {
    symlinkSync("/", path.join(t.workspace, "way-out"));
    for (const cwd of ["../..", "/", "/etc", "way-out", "sub/../../"]) {
      expectReason(await rpcError(processes.execute({ config: { command: ["pwd"], cwd } })), {
        code: Code.PermissionDenied,
        reason: "CWD_OUTSIDE_WORKSPACE",
        metadata: { cwd, roots: t.workspace },
      });
      expectReason(await streamError(processes.start({ config: { command: ["pwd"], cwd } })), {
        code: Code.PermissionDenied,
        reason: "CWD_OUTSIDE_WORKSPACE",
        metadata: { cwd, roots: t.workspace },
      });
    }
  });

  it("keeps the newest --max-output-bytes of output and says in trailers how many bytes were dropped", async () => {
    const trailers: Headers[] = [];
    // 240,000 bytes: a numbered line of 12 bytes each, so what is kept can be checked to be the tail.
    const result = await processes.execute(
      { config: { command: ["sh", "-c", "seq 100000 119999 | sed 's/^/line /'; echo done >&2"] } },
      { onTrailer: (trailer) => trailers.push(trailer) },
    );
    expect(result.exitCode).toBe(0);
    const stdout = Buffer.from(result.stdout).toString();
    const stderr = Buffer.from(result.stderr).toString();
    expect(stdout.length + stderr.length).toBeLessThanOrEqual(outputLimit);
    expect(stdout.endsWith("line 119999\n")).toBe(true);
    expect(stderr).toBe("done\n");
    expect(Number(trailers[0].get("sandboxd-stdout-dropped-bytes"))).toBe(240_000 - stdout.length);
    expect(trailers[0].get("sandboxd-stderr-dropped-bytes")).toBe("0");
    const small: Headers[] = [];
    await processes.execute({ config: { command: ["true"] } }, { onTrailer: (trailer) => small.push(trailer) });
    expect(small[0].get("sandboxd-stdout-dropped-bytes")).toBe("0");
  });

  it("kills the whole process group when the deadline passes", async () => {
    const marker = sleepMarker();
    const error = await rpcError(
      processes.execute(
        { config: { command: ["sh", "-c", `sleep ${marker} & sleep ${marker}; wait`] } },
        { timeoutMs: 1500 },
      ),
    );
    expect(error.code).toBe(Code.DeadlineExceeded);
    await waitFor(() => sleepers(marker).length === 0, {
      timeoutMs: 15_000,
      what: "the group's sleepers to be killed",
    });
  });

  it("kills the whole process group when the caller goes away", async () => {
    const marker = sleepMarker();
    const controller = new AbortController();
    const call = processes.execute(
      { config: { command: ["sh", "-c", `sleep ${marker} & sleep ${marker}; wait`] } },
      { signal: controller.signal },
    );
    await waitFor(() => sleepers(marker).length === 2, { timeoutMs: 15_000, what: "both sleepers to run" });
    controller.abort();
    expect((await rpcError(call)).code).toBe(Code.Canceled);
    await waitFor(() => sleepers(marker).length === 0, {
      timeoutMs: 15_000,
      what: "the group's sleepers to be killed",
    });
  });
});

describe("newestThatFit", () => {
  it("keeps the newest bytes of each stream, at least half the limit each when both have that much", () => {
    const bytes = (length: number, fill: number) => Buffer.alloc(length, fill);
    const keep = (out: number, err: number, limit: number) => {
      const kept = newestThatFit(bytes(out, 1), bytes(err, 2), limit);
      return [kept.stdout.length, kept.stderr.length, kept.cut.stdout, kept.cut.stderr];
    };
    expect(keep(3, 4, 10)).toEqual([3, 4, 0, 0]);
    expect(keep(30, 0, 10)).toEqual([10, 0, 20, 0]);
    expect(keep(0, 30, 10)).toEqual([0, 10, 0, 30 - 10]);
    expect(keep(30, 30, 10)).toEqual([5, 5, 25, 25]);
    expect(keep(2, 30, 10)).toEqual([2, 8, 0, 22]);
    expect(keep(30, 2, 10)).toEqual([8, 2, 22, 0]);
    const kept = newestThatFit(Buffer.from("abcdef"), Buffer.from("uvwxyz"), 6);
    expect([Buffer.from(kept.stdout).toString(), Buffer.from(kept.stderr).toString()]).toEqual(["def", "xyz"]);
  });

  it("bounds Execute's answer to what a default gRPC client accepts", () => {
    expect(maxExecuteOutputBytes).toBe(4 * 1024 * 1024 - 64 * 1024);
  });
});

describe("process.v1 Start", () => {
  it("streams init with the OS pid first, then output, then the exit", async () => {
    const headers: Headers[] = [];
    const stream = startStream(
      { config: { command: ["sh", "-c", "echo out; echo err >&2; exit 7"] } },
      { onHeader: (header) => headers.push(header) },
    );
    const pid = await stream.init();
    expect(pid).toBeGreaterThan(0);
    const result = await stream.drain();
    expect(result).toEqual({ stdout: Buffer.from("out\n"), stderr: Buffer.from("err\n"), exitCode: 7 });
    // The same process is a sandbox.v1 record, named in a header, with the same pid.
    const record = await t.client.getProcess({ processId: headers[0].get("sandboxd-process-id")! });
    expect(record.process?.pid).toBe(pid);
    expect(record.process?.exit?.exitCode).toBe(7);
  });

  it("feeds stdin from WriteStdin and ends it with eof", async () => {
    const stream = startStream({ config: { command: ["cat"] } });
    const pid = await stream.init();
    await processes.writeStdin({ processId: pid, payload: { case: "input", value: Buffer.from("piped-") } });
    await processes.writeStdin({ processId: pid, payload: { case: "input", value: Buffer.from([0, 1, 0xfe, 0xff]) } });
    await processes.writeStdin({ processId: pid, payload: { case: "eof", value: {} } });
    const result = await stream.drain();
    expect(result.stdout).toEqual(Buffer.concat([Buffer.from("piped-"), Buffer.from([0, 1, 0xfe, 0xff])]));
    expect(result.exitCode).toBe(0);
  });

  it("sends SendSignal to the whole process group; the exit code is 128 + the signal", async () => {
    for (const [signal, number] of [
      [Signal.SIGTERM, 15],
      [Signal.SIGINT, 2],
      [Signal.SIGKILL, 9],
    ] as const) {
      const marker = sleepMarker();
      // The shell waits for both sleepers: only a signal to the group ends them all.
      const stream = startStream({
        config: { command: ["sh", "-c", `trap - INT; sleep ${marker} & sleep ${marker}; wait`] },
      });
      const pid = await stream.init();
      await waitFor(() => sleepers(marker).length === 2, { timeoutMs: 15_000, what: "both sleepers to run" });
      await processes.sendSignal({ processId: pid, signal });
      const result = await stream.drain();
      expect(result.exitCode).toBe(128 + number);
      await waitFor(() => sleepers(marker).length === 0 && groupMembers(pid).length === 0, {
        timeoutMs: 15_000,
        what: "the group to be gone",
      });
    }
  });

  it("refuses an unspecified signal with INVALID_ARGUMENT, and an unknown or exited pid with NOT_FOUND", async () => {
    const stream = startStream({ config: { command: ["cat"] } });
    const pid = await stream.init();
    expectReason(await rpcError(processes.sendSignal({ processId: pid })), {
      code: Code.InvalidArgument,
      reason: "INVALID_ARGUMENT",
      metadata: { field: "signal" },
    });
    expectReason(await rpcError(processes.sendSignal({ processId: pid, signal: 1 as Signal })), {
      code: Code.InvalidArgument,
      reason: "INVALID_ARGUMENT",
      metadata: { field: "signal" },
    });
    await processes.writeStdin({ processId: pid, payload: { case: "eof", value: {} } });
    await stream.drain();
    for (const processId of [pid, 0, -1, 2_000_000_000]) {
      const notFound = { code: Code.NotFound, reason: "PROCESS_NOT_FOUND", metadata: { pid: String(processId) } };
      expectReason(await rpcError(processes.sendSignal({ processId, signal: Signal.SIGTERM })), notFound);
      expectReason(
        await rpcError(processes.writeStdin({ processId, payload: { case: "input", value: Buffer.from("x") } })),
        notFound,
      );
      expectReason(await rpcError(processes.writeStdin({ processId, payload: { case: "eof", value: {} } })), notFound);
      expectReason(await rpcError(processes.resizeTTY({ processId, cols: 80, rows: 24 })), notFound);
    }
    // A process of this daemon that is not ours to name does not count either: the daemon's own pid.
    expectReason(await rpcError(processes.sendSignal({ processId: process.pid, signal: Signal.SIGTERM })), {
      code: Code.NotFound,
      reason: "PROCESS_NOT_FOUND",
      metadata: { pid: String(process.pid) },
    });
  });

  it("refuses input after eof with FAILED_PRECONDITION", async () => {
    const stream = startStream({ config: { command: ["sh", "-c", "cat; read x; sleep 1000"] } });
    const pid = await stream.init();
    await processes.writeStdin({ processId: pid, payload: { case: "eof", value: {} } });
    expectReason(
      await rpcError(processes.writeStdin({ processId: pid, payload: { case: "input", value: Buffer.from("late") } })),
      {
        code: Code.FailedPrecondition,
        reason: "STDIN_NOT_OPEN",
        metadata: { process_id: expect.any(String) as unknown as string },
      },
    );
    await processes.sendSignal({ processId: pid, signal: Signal.SIGKILL });
    expect((await stream.drain()).exitCode).toBe(137);
  });

  it("runs in a pty of the asked size, resized by ResizeTTY; FAILED_PRECONDITION without a pty", async () => {
    const stream = startStream({
      config: { command: ["sh", "-c", "stty size; read line; stty size"] },
      pty: { cols: 100, rows: 30 },
    });
    const pid = await stream.init();
    await stream.stdoutUntil("30 100");
    await processes.resizeTTY({ processId: pid, cols: 120, rows: 40 });
    await processes.writeStdin({ processId: pid, payload: { case: "input", value: Buffer.from("go\r") } });
    const rest = await stream.drain();
    expect(rest.stdout.toString()).toContain("40 120");
    expect(rest.exitCode).toBe(0);
    expectReason(await rpcError(processes.resizeTTY({ processId: pid, cols: 80, rows: 24 })), {
      code: Code.NotFound,
      reason: "PROCESS_NOT_FOUND",
      metadata: { pid: String(pid) },
    });

    const plain = startStream({ config: { command: ["cat"] } });
    const plainPid = await plain.init();
    expectReason(await rpcError(processes.resizeTTY({ processId: plainPid, cols: 80, rows: 24 })), {
      code: Code.FailedPrecondition,
      reason: "PTY_NOT_OPEN",
      metadata: { process_id: expect.any(String) as unknown as string },
    });
    await processes.writeStdin({ processId: plainPid, payload: { case: "eof", value: {} } });
    await plain.drain();
  });

  it("keeps the process when the stream goes away: it stays attachable through sandbox.v1", async () => {
    const controller = new AbortController();
    const headers: Headers[] = [];
    const stream = startStream(
      { config: { command: ["sh", "-c", "echo first; read x; echo second"] } },
      { signal: controller.signal, onHeader: (header) => headers.push(header) },
    );
    const pid = await stream.init();
    await stream.stdoutUntil("first");
    controller.abort();
    // The process runs on, still reachable by its pid.
    await processes.writeStdin({ processId: pid, payload: { case: "input", value: Buffer.from("\n") } });
    const logs = await collectLogs(t.client, { processId: headers[0].get("sandboxd-process-id")!, follow: true });
    expect(Buffer.concat(outputChunks(logs).map((chunk) => chunk.data)).toString()).toBe("first\nsecond\n");
    expect(logs.at(-1)?.case).toBe("exited");
  });

  it("kills the whole process group when the deadline passes", async () => {
    const marker = sleepMarker();
    const error = await streamError(
      processes.start(
        { config: { command: ["sh", "-c", `sleep ${marker} & sleep ${marker}; wait`] } },
        { timeoutMs: 1500 },
      ),
    );
    expect(error.code).toBe(Code.DeadlineExceeded);
    await waitFor(() => sleepers(marker).length === 0, {
      timeoutMs: 15_000,
      what: "the group's sleepers to be killed",
    });
  });

  it("reports a program that cannot start as sh does: init 0, the reason on stderr, exit 127", async () => {
    const stream = startStream({ config: { command: ["/no/such/program"] } });
    expect(await stream.init()).toBe(0);
    const result = await stream.drain();
    expect(result.exitCode).toBe(127);
    expect(result.stderr.toString()).toMatch(/program not found: \/no\/such\/program/);
  });
});

describe("process.v1 and sandbox.v1 on one daemon", () => {
  it("shows process.v1 processes in ListProcesses and counts them in the metrics", async () => {
    const stream = startStream({ config: { command: ["cat"] } });
    const pid = await stream.init();
    expect(isAlive(pid)).toBe(true);
    const listed = await t.client.listProcesses({});
    const record = listed.processes.find((info) => info.pid === pid);
    expect(record?.command).toBe("cat");
    // sandbox.v1 reaches it too: its KillProcess ends the Start stream.
    await t.client.killProcess({ processId: record!.processId, signal: "SIGKILL" });
    expect((await stream.drain()).exitCode).toBe(137);
    const metrics = await (await fetch(`${t.server.url}/metrics`)).text();
    expect(metrics).toMatch(/sandboxd_calls_total\{[^}]*procedure="process\.v1\.ProcessService\/Start"/);
  });

  it("is served with the daemon's health and reflection", async () => {
    const sandbox = t.connect(SandboxService);
    expect((await sandbox.listProcesses({})).processes).toBeDefined();
  });
});
