import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessStatus } from "../gen/sandbox/v1/sandbox_pb.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { parseJsonStream, runCommand, tool, type CommandResult } from "./support/tools.js";
import { waitForExit } from "./support/rpc.js";

/** An event of a stream as grpcurl prints it: proto JSON, default values left out. */
type JsonEvent = Record<string, Record<string, unknown>>;

describe("grpcurl with no proto file, through server reflection", () => {
  let test: TestServer;
  let address: string;
  const grpcurl = (args: string[], input?: string): Promise<CommandResult> =>
    runCommand(tool("grpcurl"), ["-plaintext", ...args], { input, timeoutMs: 20_000 });
  const call = async (method: string, request: unknown): Promise<JsonEvent[]> => {
    const result = await grpcurl(["-d", JSON.stringify(request), address, `sandbox.v1.SandboxService/${method}`]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    return parseJsonStream(result.stdout) as JsonEvent[];
  };

  beforeAll(async () => {
    test = await startTestServer();
    address = `127.0.0.1:${test.server.port}`;
  });
  afterAll(async () => {
    await test.close();
  });

  it("lists every service", async () => {
    const result = await grpcurl([address, "list"]);
    expect(result.code).toBe(0);
    expect(result.stdout.trim().split("\n").sort()).toEqual([
      "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
      "process.v1.ProcessService",
      "sandbox.v1.FileService",
      "sandbox.v1.SandboxService",
    ]);
  });

  it("describes sandbox.v1.SandboxService with every RPC and its stream shape", async () => {
    const result = await grpcurl([address, "describe", "sandbox.v1.SandboxService"]);
    expect(result.code).toBe(0);
    const rpcs = result.stdout
      .split("\n")
      .filter((line) => line.trim().startsWith("rpc "))
      .map((line) => line.trim());
    expect(rpcs).toHaveLength(14);
    expect(rpcs).toContain(
      "rpc WaitForLog ( .sandbox.v1.WaitForLogRequest ) returns ( .sandbox.v1.WaitForLogResponse );",
    );
    expect(rpcs).toContain("rpc Exec ( .sandbox.v1.ExecRequest ) returns ( stream .sandbox.v1.ExecResponse );");
    expect(rpcs).toContain(
      "rpc StartProcess ( .sandbox.v1.StartProcessRequest ) returns ( .sandbox.v1.StartProcessResponse );",
    );
    expect(rpcs).toContain(
      "rpc StreamLogs ( .sandbox.v1.StreamLogsRequest ) returns ( stream .sandbox.v1.StreamLogsResponse );",
    );
    expect(rpcs).toContain(
      "rpc SendInput ( stream .sandbox.v1.SendInputRequest ) returns ( stream .sandbox.v1.SendInputResponse );",
    );
  });

  it("describes messages that import google.protobuf well-known types", async () => {
    const result = await grpcurl([address, "describe", "sandbox.v1.ProcessExited"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(".google.protobuf.Timestamp start_time = 6;");
    expect(result.stdout).toContain(".google.protobuf.Duration duration = 8;");
    const timestamp = await grpcurl([address, "describe", "google.protobuf.Timestamp"]);
    expect(timestamp.stdout).toContain("int64 seconds = 1;");
  });

  it("says NOT_FOUND for a symbol the server does not know", async () => {
    const result = await grpcurl([address, "describe", "sandbox.v1.NoSuchThing"]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("Symbol not found: sandbox.v1.NoSuchThing");
  });

  it("runs Exec with -d and prints every event, started first and exited last", async () => {
    const events = await call("Exec", {
      spec: { command: "printf 'out\\n'; sleep 0.05; printf 'err' >&2; sleep 0.05; printf 'more\\n'; exit 3" },
    });
    expect(Object.keys(events[0])).toEqual(["started"]);
    expect(events[0].started.status).toBe("PROCESS_STATUS_RUNNING");
    expect(Object.keys(events.at(-1)!)).toEqual(["exited"]);
    expect(events.at(-1)!.exited).toMatchObject({
      status: "PROCESS_STATUS_FAILED",
      exitCode: 3,
      stdoutBytes: "9",
      stderrBytes: "3",
    });
    const outputs = events.slice(1, -1).map((event) => event.output);
    expect(outputs.every((output) => output !== undefined)).toBe(true);
    const stdout = outputs.filter((output) => output.stream === "OUTPUT_STREAM_STDOUT");
    const stderr = outputs.filter((output) => output.stream === "OUTPUT_STREAM_STDERR");
    expect(Buffer.concat(stdout.map((output) => Buffer.from(output.data as string, "base64"))).toString()).toBe(
      "out\nmore\n",
    );
    expect(Buffer.concat(stderr.map((output) => Buffer.from(output.data as string, "base64"))).toString()).toBe("err");
    // Offsets are uint64, so proto JSON writes them as strings; 0 is left out.
    expect(stdout.map((output) => output.offset ?? "0")).toEqual(["0", "4"]);
  });

  it("starts a background process with StartProcess and follows it with StreamLogs", async () => {
    const [started] = await call("StartProcess", {
      spec: { command: "echo one; sleep 0.3; echo two", processId: "grpcurl-logs" },
    });
    expect(started.process).toMatchObject({ processId: "grpcurl-logs", status: "PROCESS_STATUS_RUNNING" });
    const events = await call("StreamLogs", { processId: "grpcurl-logs", follow: true });
    expect(Object.keys(events[0])).toEqual(["process"]);
    expect(Object.keys(events.at(-1)!)).toEqual(["exited"]);
    expect(events.at(-1)!.exited.status).toBe("PROCESS_STATUS_COMPLETED");
    const output = events.flatMap((event) =>
      event.output ? [Buffer.from(event.output.data as string, "base64")] : [],
    );
    expect(Buffer.concat(output).toString()).toBe("one\ntwo\n");
  });

  it("feeds a process through the SendInput bidi stream from JSON on stdin", async () => {
    await call("StartProcess", { spec: { command: "tr a-z A-Z", processId: "grpcurl-input", stdin: true } });
    const input = [
      { open: { processId: "grpcurl-input" } },
      { data: Buffer.from("hello ").toString("base64") },
      { data: Buffer.from("bidi\n").toString("base64") },
      { close: {} },
    ];
    const result = await grpcurl(
      ["-d", "@", address, "sandbox.v1.SandboxService/SendInput"],
      input.map((message) => JSON.stringify(message)).join("\n"),
    );
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    // One acknowledgement per message, in order, counting the bytes written so far.
    expect(parseJsonStream(result.stdout)).toEqual([
      {},
      { bytesWritten: "6" },
      { bytesWritten: "11" },
      { bytesWritten: "11", closed: true },
    ]);
    const exit = await waitForExit(test.client, "grpcurl-input");
    expect(exit.status).toBe(ProcessStatus.COMPLETED);
    const { stdout } = await test.client.getProcessLogs({ processId: "grpcurl-input" });
    expect(Buffer.from(stdout).toString()).toBe("HELLO BIDI\n");
  });

  it("checks health, for the server and for sandbox.v1.SandboxService, and NOT_FOUND for others", async () => {
    const server = await grpcurl([address, "grpc.health.v1.Health/Check"]);
    expect(server.code).toBe(0);
    expect(parseJsonStream(server.stdout)).toEqual([{ status: "SERVING" }]);
    const service = await grpcurl([
      "-d",
      '{"service":"sandbox.v1.SandboxService"}',
      address,
      "grpc.health.v1.Health/Check",
    ]);
    expect(parseJsonStream(service.stdout)).toEqual([{ status: "SERVING" }]);
    const unknown = await grpcurl(["-d", '{"service":"nope.v1.Nope"}', address, "grpc.health.v1.Health/Check"]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain("Code: NotFound");
  });
});
