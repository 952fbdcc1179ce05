import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { groupMembers, waitFor } from "./support/processes.js";
import { sleepers, sleepMarker } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { type CommandResult, parseJsonStream, runCommand, tool } from "./support/tools.js";

/** grpcurl left running (a Start stream it follows): what it printed so far, and its end. */
function spawnGrpcurl(args: readonly string[]): { stdoutText(): string; done: Promise<CommandResult> } {
  const child = spawn(tool("grpcurl"), ["-plaintext", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const done = new Promise<CommandResult>((resolve) =>
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
  return { stdoutText: () => stdout, done };
}

/** An event of a Start stream as grpcurl prints it: proto JSON, bytes in base64, default values left out. */
type StartEvent = { init?: { processId?: number }; stdout?: string; stderr?: string; exit?: { exitCode?: number } };

describe("grpcurl against the KEP-539.2 gRPC port, through server reflection", () => {
  let test: TestServer;
  let address: string;
  const grpcurl = (args: string[], input?: string): Promise<CommandResult> =>
    runCommand(tool("grpcurl"), ["-plaintext", ...args], { input, timeoutMs: 30_000 });
  const call = async (method: string, request: unknown): Promise<unknown[]> => {
    const result = await grpcurl(["-d", JSON.stringify(request), address, `process.v1.ProcessService/${method}`]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    return parseJsonStream(result.stdout);
  };
  const decode = (events: StartEvent[], stream: "stdout" | "stderr") =>
    Buffer.concat(events.flatMap((event) => (event[stream] ? [Buffer.from(event[stream], "base64")] : []))).toString();

  beforeAll(async () => {
    test = await startTestServer({ agentSandbox: { grpcPort: 0 } });
    address = `127.0.0.1:${test.server.agentSandboxPorts.grpc}`;
  });
  afterAll(async () => {
    await test.close();
  });

  it("lists process.v1.ProcessService and describes it as the KEP defines it", async () => {
    const list = await grpcurl([address, "list"]);
    expect(list.stdout.split("\n")).toContain("process.v1.ProcessService");
    const described = await grpcurl([address, "describe", "process.v1.ProcessService"]);
    expect(described.code).toBe(0);
    for (const line of [
      "rpc Start ( .process.v1.StartRequest ) returns ( stream .process.v1.StartResponse );",
      "rpc Execute ( .process.v1.ExecuteRequest ) returns ( .process.v1.ExecuteResponse );",
      "rpc WriteStdin ( .process.v1.WriteStdinRequest ) returns ( .process.v1.WriteStdinResponse );",
      "rpc SendSignal ( .process.v1.SendSignalRequest ) returns ( .process.v1.SendSignalResponse );",
      "rpc ResizeTTY ( .process.v1.ResizeTTYRequest ) returns ( .process.v1.ResizeTTYResponse );",
    ]) {
      expect(described.stdout).toContain(line);
    }
  });

  it("runs the reference daemon's own grpcurl lines: Execute, Start, Start in a pty", async () => {
    expect(await call("Execute", { config: { command: ["echo", "hello"] } })).toEqual([
      { stdout: Buffer.from("hello\n").toString("base64") },
    ]);
    const started = (await call("Start", {
      config: { command: ["sh", "-c", "for i in 1 2 3; do echo $i; done; exit 4"] },
    })) as StartEvent[];
    expect(started[0].init?.processId).toBeGreaterThan(0);
    expect(decode(started, "stdout")).toBe("1\n2\n3\n");
    expect(started.at(-1)).toEqual({ exit: { exitCode: 4 } });
    const terminal = (await call("Start", {
      config: { command: ["sh", "-c", "stty size && tty"] },
      pty: { cols: 80, rows: 24 },
    })) as StartEvent[];
    expect(decode(terminal, "stdout")).toMatch(/^24 80\r\n\/dev\/pts\/\d+\r\n$/);
    expect(terminal.at(-1)).toEqual({ exit: {} });
  });

  it("writes stdin, signals the group and resizes the pty of a process a Start stream follows", async () => {
    const marker = sleepMarker();
    const follower = spawnGrpcurl([
      "-d",
      JSON.stringify({
        config: {
          command: ["sh", "-c", `read line; echo "got $line"; stty size; sleep ${marker} & sleep ${marker}; wait`],
        },
        pty: {},
      }),
      address,
      "process.v1.ProcessService/Start",
    ]);
    const pid = await waitFor(() => (parseJsonStream(follower.stdoutText()) as StartEvent[])[0]?.init?.processId ?? 0, {
      timeoutMs: 30_000,
      what: "the init event",
    });
    expect(await call("ResizeTTY", { process_id: pid, cols: 100, rows: 33 })).toEqual([{}]);
    expect(await call("WriteStdin", { process_id: pid, input: Buffer.from("ping\r").toString("base64") })).toEqual([
      {},
    ]);
    await waitFor(() => sleepers(marker).length === 2, { timeoutMs: 30_000, what: "both sleepers" });
    expect(await call("SendSignal", { process_id: pid, signal: "SIGNAL_SIGTERM" })).toEqual([{}]);
    const result = await follower.done;
    expect(result.code).toBe(0);
    const events = parseJsonStream(result.stdout) as StartEvent[];
    expect(decode(events, "stdout")).toContain("got ping\r\n33 100\r\n");
    // The pty's session leader took SIGTERM: 128 + 15.
    expect(events.at(-1)).toEqual({ exit: { exitCode: 143 } });
    await waitFor(() => sleepers(marker).length === 0 && groupMembers(pid).length === 0, {
      timeoutMs: 15_000,
      what: "the group to be gone",
    });
  });

  it("prints the KEP's status codes with the ErrorInfo reason", async () => {
    const unknown = await grpcurl([
      "-format-error",
      "-d",
      '{"process_id": 2000000000, "signal": "SIGNAL_SIGTERM"}',
      address,
      "process.v1.ProcessService/SendSignal",
    ]);
    expect(unknown.code).toBe(69);
    expect(unknown.stderr).toContain('"code": 5');
    expect(unknown.stderr).toContain('"reason": "PROCESS_NOT_FOUND"');
    const outside = await grpcurl([
      "-d",
      '{"config": {"command": ["pwd"], "cwd": "../.."}}',
      address,
      "process.v1.ProcessService/Execute",
    ]);
    expect(outside.stderr).toContain("Code: PermissionDenied");
    const started = (await call("Start", { config: { command: ["true"] } })) as StartEvent[];
    const gone = await grpcurl([
      "-d",
      JSON.stringify({ process_id: started[0].init?.processId, cols: 80, rows: 24 }),
      address,
      "process.v1.ProcessService/ResizeTTY",
    ]);
    expect(gone.stderr).toContain("Code: NotFound");
    const follower = spawnGrpcurl([
      "-d",
      '{"config": {"command": ["cat"]}}',
      address,
      "process.v1.ProcessService/Start",
    ]);
    const pid = await waitFor(() => (parseJsonStream(follower.stdoutText()) as StartEvent[])[0]?.init?.processId ?? 0, {
      timeoutMs: 30_000,
      what: "init",
    });
    const noPty = await grpcurl([
      "-d",
      JSON.stringify({ process_id: pid, cols: 80, rows: 24 }),
      address,
      "process.v1.ProcessService/ResizeTTY",
    ]);
    expect(noPty.stderr).toContain("Code: FailedPrecondition");
    expect(await call("WriteStdin", { process_id: pid, eof: {} })).toEqual([{}]);
    expect((await follower.done).code).toBe(0);
  });
});
