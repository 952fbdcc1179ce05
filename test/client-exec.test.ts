import { chmodSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  ExecutionTimeoutError,
  isExecResult,
  SandboxError,
  type ExecEvent,
  type ExecResult,
  type Sandbox,
} from "../src/client/index.js";
import { Launcher } from "../src/process/index.js";
import { waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
let sandbox: Sandbox;
beforeAll(async () => {
  t = await startTestServer();
  sandbox = await connect({ baseUrl: t.server.url, workspace: [t.workspace] });
});
afterAll(async () => {
  await sandbox.close();
  await t.close();
});

describe("exec (seed 000)", () => {
  it("runs a command and resolves with every ExecResult field", async () => {
    const before = Date.now();
    const result: ExecResult = await sandbox.exec("ls -la");
    expect(isExecResult(result)).toBe(true);
    expect(result.success).toBe(true);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toContain("..");
    expect(result.stderr).toBe("");
    expect(result.output).toBe(result.stdout);
    expect(result.command).toBe("ls -la");
    expect(result.duration).toBeGreaterThanOrEqual(0);
    expect(Date.parse(result.timestamp)).toBeGreaterThanOrEqual(before - 1000);
    expect(result.sessionId).toBe(sandbox.sessionId);
    expect(result.signal).toBeUndefined();
  });

  it("streams output through callbacks, as the seed's build example does", async () => {
    const seen: Array<[string, string]> = [];
    const completed: ExecResult[] = [];
    writeFileSync(
      path.join(t.workspace, "package.json"),
      JSON.stringify({ scripts: { build: "echo building; echo warn >&2; echo built" } }),
    );
    const buildResult: ExecResult = await sandbox.exec("npm run build --silent", {
      stream: true,
      onOutput: (stream: "stdout" | "stderr", data: string) => {
        seen.push([stream, data]);
      },
      onComplete: (result) => completed.push(result),
      timeout: 60000,
      signal: new AbortController().signal,
    });
    expect(buildResult.success).toBe(true);
    expect(
      seen
        .filter(([stream]) => stream === "stdout")
        .map(([, data]) => data)
        .join(""),
    ).toBe("building\nbuilt\n");
    expect(
      seen
        .filter(([stream]) => stream === "stderr")
        .map(([, data]) => data)
        .join(""),
    ).toBe("warn\n");
    expect(completed).toEqual([buildResult]);
  });

  it("takes env, cwd, sessionId and argv-form args", async () => {
    const sub = path.join(t.workspace, "sub");
    await sandbox.exec(`mkdir -p ${sub}`);
    const result = await sandbox.exec('echo "$GREETING from $(pwd)"', {
      env: { GREETING: "hello" },
      cwd: "sub",
      sessionId: "session-x",
    });
    expect(result.stdout).toBe(`hello from ${sub}\n`);
    expect(result.sessionId).toBe("session-x");
    const argv = await sandbox.exec("printf", { args: ["%s|", "a b", "$HOME", "*"] });
    expect(argv.stdout).toBe("a b|$HOME|*|");
    expect(argv.command).toBe("printf %s| a b $HOME *");
  });

  it("leaves confining cwd to the daemon, which resolves symlinks: a path that leads out of the workspace is refused", async () => {
    await expect(sandbox.exec("pwd", { cwd: "/etc" })).rejects.toMatchObject({
      name: "SandboxError",
      code: "PERMISSION_DENIED",
      reason: "CWD_OUTSIDE_WORKSPACE",
      metadata: { cwd: "/etc" },
    });
    // Inside the workspace by its name, outside by where it leads: a client cannot know, the daemon can.
    symlinkSync("/etc", path.join(t.workspace, "leads-out"));
    await expect(sandbox.exec("pwd", { cwd: "leads-out" })).rejects.toMatchObject({
      code: "PERMISSION_DENIED",
      reason: "CWD_OUTSIDE_WORKSPACE",
    });
  });

  it("writes `input` to stdin and closes it; `stdin` is only true or false", async () => {
    expect((await sandbox.exec("wc -c", { input: "hello\n" })).stdout.trim()).toBe("6");
    expect((await sandbox.exec("cat", { input: new Uint8Array([0xe2, 0x82, 0xac]) })).stdout).toBe("€");
    // Text in `stdin` (its meaning before `input` existed) is refused, not taken as "open a pipe".
    await expect(sandbox.exec("cat", { stdin: "hello" } as never)).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
  });

  it("decodes incrementally, never splitting a multi-byte character across chunks", async () => {
    // "€" is e2 82 ac and "😀" f0 9f 98 80: each written a byte at a time, in separate chunks.
    const pieces: string[] = [];
    const result = await sandbox.exec(
      "for b in '\\342' '\\202' '\\254' '\\360' '\\237' '\\230' '\\200'; do printf \"$b\"; sleep 0.05; done; printf '\\342\\202' >&2; sleep 0.05; printf '\\254' >&2",
      { onOutput: (_stream, data) => pieces.push(data) },
    );
    expect(result.stdout).toBe("€😀");
    expect(result.stderr).toBe("€");
    expect(pieces.join("")).toBe("€😀€");
    expect(pieces.every((piece) => !piece.includes("\ufffd"))).toBe(true);
  });

  it("decodes other encodings", async () => {
    const result = await sandbox.exec("printf '\\351t\\351'", { encoding: "latin1" });
    expect(result.stdout).toBe("été");
    await expect(sandbox.exec("true", { encoding: "no-such-encoding" })).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
  });

  it("a command its timeout killed rejects with ExecutionTimeoutError, as the Cloudflare SDK defines it, and leaves no process", async () => {
    const marker = sleepMarker();
    const errors: Error[] = [];
    const error = await sandbox
      .exec(`echo before; sleep ${marker}`, { timeout: 300, onError: (failure) => errors.push(failure) })
      .catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(ExecutionTimeoutError);
    expect(error).toMatchObject({ code: "EXECUTION_TIMEOUT", timeout: 300 });
    expect(errors).toEqual([error]);
    await waitFor(() => sleepers(marker).length === 0, { what: "the timed-out sleep to be gone" });
  });

  it("the sandbox's own time limit applies when the call names none", async () => {
    const own = await connect({ baseUrl: t.server.url, timeoutMs: 200 });
    try {
      await expect(own.exec("sleep 5")).rejects.toMatchObject({ name: "ExecutionTimeoutError", timeout: 200 });
    } finally {
      await own.close();
    }
  });

  it("aborting kills the remote command and rejects with the signal's reason", async () => {
    const marker = sleepMarker();
    const controller = new AbortController();
    const errors: Error[] = [];
    const running = sandbox.exec(`sleep ${marker}`, {
      signal: controller.signal,
      onError: (error) => errors.push(error),
    });
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep to start" });
    controller.abort(new Error("changed my mind"));
    await expect(running).rejects.toThrow("changed my mind");
    expect(errors.map((error) => error.message)).toEqual(["changed my mind"]);
    await waitFor(() => sleepers(marker).length === 0, { what: "the aborted sleep to be gone" });
  });

  it("an already aborted signal runs nothing", async () => {
    const marker = sleepMarker();
    await expect(sandbox.exec(`sleep ${marker}`, { signal: AbortSignal.abort() })).rejects.toThrow();
    expect(sleepers(marker)).toEqual([]);
  });

  it("runs a script without #! as the shell runs it, as a command line and in argv form", async () => {
    // Through the helper where this machine routes commands through it, and through the addon's own
    // spawn (the way without the helper): both give the shell the name as it was written.
    const helperless = await startTestServer({ launcher: Launcher.create({ execHelper: null }) });
    const direct = await connect({ baseUrl: helperless.server.url, workspace: [helperless.workspace] });
    try {
      for (const [client, workspace] of [
        [sandbox, t.workspace],
        [direct, helperless.workspace],
      ] as const) {
        const script = path.join(workspace, "no-shebang");
        writeFileSync(script, 'echo "ran $0 $1"\n');
        chmodSync(script, 0o755);
        expect(await client.exec("./no-shebang first")).toMatchObject({
          exitCode: 0,
          stdout: "ran ./no-shebang first\n",
        });
        expect(await client.exec("./no-shebang", { args: ["second"] })).toMatchObject({
          exitCode: 0,
          stdout: "ran ./no-shebang second\n",
        });
      }
    } finally {
      await direct.close();
      await helperless.close();
    }
  });

  it("passes on the variables the shell would: none whose name it could not name", async () => {
    const env = { "a.b": "dotted", "FOO-BAR": "dashed", PLAIN_NAME: "plain" };
    // A line of plain words runs without the shell, and still sees what `sh -c` would pass on.
    const direct = (await sandbox.exec("env", { env })).stdout;
    const viaShell = (await sandbox.exec("env | cat", { env })).stdout;
    for (const output of [direct, viaShell]) {
      expect(output).toContain("PLAIN_NAME=plain\n");
      expect(output).not.toContain("dotted");
      expect(output).not.toContain("dashed");
    }
  });

  it("returns exit 127 for a missing program and a SandboxError for a refused command", async () => {
    const missing = await sandbox.exec("no-such-program-xyz", { args: ["a"] });
    expect(missing.exitCode).toBe(127);
    await expect(sandbox.exec("")).rejects.toBeInstanceOf(SandboxError);
  });
});

describe("exec (seed 004): one call, a guaranteed exit code and joined output", () => {
  it("joins stdout and stderr in arrival order and keeps the exit code", async () => {
    const result = await sandbox.exec("sh", {
      args: ["-c", "echo hello && sleep 0.05 && echo oops >&2 && sleep 0.05 && echo again && exit 3"],
    });
    expect(result.exitCode).toBe(3);
    expect(result.output).toBe("hello\noops\nagain\n");
    expect(result.stdout).toBe("hello\nagain\n");
    expect(result.stderr).toBe("oops\n");
  });

  it("takes the Together SDK's call shape, exec(command, args, options), and resolves with exactly { exitCode, output }", async () => {
    expect(await sandbox.exec("echo", ["hi"])).toEqual({ exitCode: 0, output: "hi\n" });
    const result = await sandbox.exec("sh", ["-c", "echo hello && echo oops >&2 && exit 3"], {
      cwd: t.workspace,
      env: { X: "1" },
    });
    expect(result.exitCode).toBe(3);
    expect(result.output.split("\n").sort()).toEqual(["", "hello", "oops"]);
    // A command its time limit killed still has an exit code, so it resolves.
    expect(await sandbox.exec("sleep", ["5"], { timeoutMs: 100 })).toEqual({ exitCode: 137, output: "" });
  });

  it("never ignores an argument of the wrong shape", async () => {
    await expect(sandbox.exec("echo", "hi" as never)).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    await expect(sandbox.exec("echo", { args: ["a"] } as never, { cwd: "/" } as never)).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
    // An option named as another API names it (`timeoutMs` is the core's; the Cloudflare shape says `timeout`).
    await expect(sandbox.exec("true", { timeoutMs: 5 } as never)).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    await expect(sandbox.exec("echo", ["x"], { timeout: 5 } as never)).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
  });

  it("with pty, stderr arrives merged into stdout", async () => {
    const result = await sandbox.exec("echo out; echo err >&2; test -t 1 && echo tty", { pty: true });
    expect(result.stderr).toBe("");
    expect(result.stdout.replaceAll("\r\n", "\n")).toBe("out\nerr\ntty\n");
    expect(result.output).toBe(result.stdout);
  });

  it("throws a SandboxError when the stream ends without an exit, never inventing an exit code", async () => {
    const own = await startTestServer();
    const client = await connect({ baseUrl: own.server.url });
    const marker = sleepMarker();
    const running = client.exec(`sleep ${marker}`);
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep to start" });
    const closing = own.close();
    const error = await running.then(
      (result) => result,
      (failure: unknown) => failure,
    );
    await closing;
    await client.close();
    expect(error).toBeInstanceOf(SandboxError);
    expect(isExecResult(error)).toBe(false);
    expect((error as SandboxError).code).toBe("UNAVAILABLE");
  });
});

describe("execStream (seed 000)", () => {
  it("yields start, stdout, stderr and complete, as the seed's switch handles them", async () => {
    const events: ExecEvent[] = [];
    let printed = "";
    // Asked to keep its output, the complete event's result has it all, as exec()'s does.
    for await (const event of sandbox.execStream("echo one; echo two >&2; exit 4", { maxRetainedBytes: Infinity })) {
      events.push(event);
      switch (event.type) {
        case "start":
          printed += `Started: ${event.command}\n`;
          break;
        case "stdout":
          printed += event.data!;
          break;
        case "complete":
          printed += `Completed with exit code: ${event.exitCode}\n`;
          break;
      }
    }
    expect(printed).toBe("Started: echo one; echo two >&2; exit 4\none\nCompleted with exit code: 4\n");
    expect(events.map((event) => event.type)).toEqual(["start", "stdout", "stderr", "complete"]);
    expect(events.at(-1)?.result).toMatchObject({
      exitCode: 4,
      stdout: "one\n",
      stderr: "two\n",
      output: "one\ntwo\n",
    });
    expect(events.every((event) => !Number.isNaN(Date.parse(event.timestamp)))).toBe(true);
  });

  it("breaking out of the loop cancels the call and kills the command", async () => {
    const marker = sleepMarker();
    let seen = 0;
    for await (const event of sandbox.execStream(`echo ready; sleep ${marker}`)) {
      if (event.type === "stdout") {
        seen++;
        await waitFor(() => sleepers(marker).length === 1, { what: "the sleep to start" });
        break;
      }
    }
    expect(seen).toBe(1);
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be killed after break" });
  });

  it("aborting yields an error event, ends the stream and kills the command", async () => {
    const marker = sleepMarker();
    const controller = new AbortController();
    const types: string[] = [];
    for await (const event of sandbox.execStream(`echo ready; sleep ${marker}`, { signal: controller.signal })) {
      types.push(event.type);
      if (event.type === "stdout") controller.abort();
    }
    expect(types).toEqual(["start", "stdout", "error"]);
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be killed after abort" });
  });

  it("a command its timeout killed ends with one error event carrying ExecutionTimeoutError", async () => {
    const types: string[] = [];
    let error: Error | undefined;
    for await (const event of sandbox.execStream("echo before; sleep 5", { timeout: 300 })) {
      types.push(event.type);
      error ??= event.error;
    }
    expect(types).toEqual(["start", "stdout", "error"]);
    expect(error).toBeInstanceOf(ExecutionTimeoutError);
  });

  it("a refused command is one error event", async () => {
    const events: ExecEvent[] = [];
    for await (const event of sandbox.execStream("true", { cwd: "no/such/dir" })) events.push(event);
    expect(events.map((event) => event.type)).toEqual(["error"]);
    expect(events[0].error).toBeInstanceOf(SandboxError);
  });

  it("a slow consumer gets every byte (backpressure holds the command back), and the stream keeps none", async () => {
    let bytes = 0;
    let result: ExecResult | undefined;
    for await (const event of sandbox.execStream("head -c 3000000 /dev/zero | tr '\\0' x")) {
      if (event.type === "stdout") {
        bytes += event.data!.length;
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
      if (event.type === "complete") result = event.result;
    }
    expect(bytes).toBe(3_000_000);
    // What was handed over is not kept: the result has the exit, not a second copy of the output.
    expect(result).toMatchObject({ exitCode: 0, stdout: "", output: "" });
    expect(result?.stdoutBytes.length).toBe(0);
  });

  it("gives each event's text when it is read: in any order, assignable, in JSON, and the same as decoded at once", async () => {
    const events: ExecEvent[] = [];
    // A multi-byte character cut between writes, and a second stream between them.
    const line = "printf 'caf\\303'; sleep 0.1; printf '\\251 x' >&2; sleep 0.1; printf '\\251 fin'";
    for await (const event of sandbox.execStream(line))
      if (event.type === "stdout" || event.type === "stderr") events.push(event);
    // Read from the last to the first: each text is still the one its place in the stream gives.
    const texts = events.map((_, index) => events[events.length - 1 - index]!.data).reverse();
    const joined = (stream: string) => texts.filter((_, index) => events[index]!.type === stream).join("");
    expect(joined("stdout")).toBe("café fin");
    expect(joined("stderr")).toBe("\ufffd x");
    expect(JSON.parse(JSON.stringify(events[0]))).toMatchObject({ type: "stdout", data: texts[0] });
    expect({ ...events[events.length - 1] }.data).toBe(texts[texts.length - 1]);
    events[0]!.data = "replaced";
    expect(events[0]!.data).toBe("replaced");
    // An event frozen before its text was read still gives it.
    const frozen: string[] = [];
    for await (const event of sandbox.execStream("echo frozen"))
      if (event.type === "stdout") frozen.push(Object.freeze(event).data!);
    expect(frozen.join("")).toBe("frozen\n");
  });

  it("hands over output that arrived before the loop asked for it, though it keeps none", async () => {
    const sessionId = `early-${process.pid}-${Date.now()}`;
    const stdout: string[] = [];
    for await (const event of sandbox.execStream("printf early", { sessionId })) {
      if (event.type === "start") {
        // Everything is sent before the loop goes on: the daemon has the exit and has let go of the output.
        await waitFor(() => {
          const [record] = t.server.manager.list({ sessionId });
          return record?.exit !== undefined && record.snapshotOutput("stdout").length === 0;
        });
      }
      if (event.type === "stdout") stdout.push(event.data!);
    }
    expect(stdout.join("")).toBe("early");
  });

  it("keeps the newest maxRetainedBytes of output for the result when asked", async () => {
    let result: ExecResult | undefined;
    for await (const event of sandbox.execStream("printf 'abcdefgh'; sleep 0.2; printf 'ij' >&2", {
      maxRetainedBytes: 4,
    }))
      if (event.type === "complete") result = event.result;
    expect(result?.stderr).toBe("ij");
    expect(result?.stdout.length).toBeLessThanOrEqual(4);
  });
});

describe("exec over the Connect protocol", () => {
  it("runs the same", async () => {
    const connectSandbox = await connect({ baseUrl: t.server.url, protocol: "connect" });
    try {
      const result = await connectSandbox.exec("echo via connect; exit 2");
      expect(result).toMatchObject({ exitCode: 2, stdout: "via connect\n" });
      const events: string[] = [];
      for await (const event of connectSandbox.execStream("echo streamed")) events.push(event.type);
      expect(events).toEqual(["start", "stdout", "complete"]);
    } finally {
      await connectSandbox.close();
    }
  });
});
