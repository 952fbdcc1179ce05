import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "./support/server.js";
import { parseJsonStream, repositoryRoot, runCommand, type CommandResult } from "./support/tools.js";

/** The buf CLI of the dev dependencies (what `npx buf` runs). */
const buf = path.join(repositoryRoot, "node_modules/.bin/buf");

type JsonEvent = Record<string, Record<string, unknown>>;

describe("buf curl with no proto file, through server reflection", () => {
  let test: TestServer;
  const bufCurl = (args: string[]): Promise<CommandResult> => runCommand(buf, ["curl", ...args], { timeoutMs: 20_000 });
  const ok = (result: CommandResult) => {
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    return parseJsonStream(result.stdout) as JsonEvent[];
  };

  beforeAll(async () => {
    test = await startTestServer();
  });
  afterAll(async () => {
    await test.close();
  });

  it("lists the services", async () => {
    const result = await bufCurl(["--http2-prior-knowledge", "--list-services", test.server.url]);
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

  for (const [name, flags] of [
    ["Connect over HTTP/1.1", []],
    ["Connect over HTTP/2", ["--http2-prior-knowledge"]],
    ["gRPC", ["--http2-prior-knowledge", "--protocol", "grpc"]],
    ["gRPC-Web", ["--protocol", "grpcweb"]],
  ] as const) {
    it(`streams Exec with ${name}, started first and exited last`, async () => {
      const events = ok(
        await bufCurl([
          ...flags,
          "-d",
          JSON.stringify({ spec: { command: "echo via buf curl" } }),
          `${test.server.url}/sandbox.v1.SandboxService/Exec`,
        ]),
      );
      expect(Object.keys(events[0])).toEqual(["started"]);
      expect(events.at(-1)!.exited).toMatchObject({ status: "PROCESS_STATUS_COMPLETED", exitCode: 0 });
      const output = events.flatMap((event) =>
        event.output ? [Buffer.from(event.output.data as string, "base64")] : [],
      );
      expect(Buffer.concat(output).toString()).toBe("via buf curl\n");
    });
  }

  it("calls a unary RPC, and reports the error code of a failing one", async () => {
    const [started] = ok(
      await bufCurl([
        "-d",
        JSON.stringify({ spec: { command: "exit 0", processId: "buf-curl" } }),
        `${test.server.url}/sandbox.v1.SandboxService/StartProcess`,
      ]),
    );
    expect(started.process.processId).toBe("buf-curl");
    const missing = await bufCurl([
      "-d",
      '{"processId":"no-such-process"}',
      `${test.server.url}/sandbox.v1.SandboxService/GetProcess`,
    ]);
    expect(missing.code).not.toBe(0);
    expect(JSON.parse(missing.stderr)).toEqual({
      code: "not_found",
      message: "process not found: no-such-process",
      // The reason every language can branch on: a google.rpc.ErrorInfo, with its JSON form under debug.
      details: [
        {
          type: "google.rpc.ErrorInfo",
          value: expect.any(String),
          debug: { reason: "PROCESS_NOT_FOUND", domain: "sandbox.v1", metadata: { process_id: "no-such-process" } },
        },
      ],
    });
  });

  it("checks health with gRPC", async () => {
    const events = ok(
      await bufCurl([
        "--http2-prior-knowledge",
        "--protocol",
        "grpc",
        `${test.server.url}/grpc.health.v1.Health/Check`,
      ]),
    );
    expect(events).toEqual([{ status: "SERVING" }]);
  });
});
