import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../gen/google/rpc/status_pb.js";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { maxArgumentBytes, maxIdLength, maxPendingInputBytes, maxPathBytes } from "../src/process/index.js";
import { Code, collectExec, rpcError, streamError } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

describe("free strings and sizes are bounded, each refusal INVALID_ARGUMENT naming the bound", () => {
  let test: TestServer;
  beforeAll(async () => {
    test = await startTestServer({ maxMessageBytes: 16 * 1024 * 1024 });
  });
  afterAll(() => test.close());

  it("session ids: in a spec and in every filter", async () => {
    const long = "s".repeat(1024 * 1024);
    for (const refused of [
      rpcError(test.client.startProcess({ spec: { command: "true", sessionId: long } })),
      rpcError(test.client.listProcesses({ sessionId: long })),
      rpcError(test.client.killAllProcesses({ sessionId: long })),
      rpcError(test.client.cleanupProcesses({ sessionId: long })),
    ]) {
      const error = await refused;
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toBe(`session id is longer than ${maxIdLength} characters`);
    }
    expect(test.server.manager.list()).toHaveLength(0);
  });

  it("command, arguments, environment, working directory, TERM", async () => {
    const cases: Array<[Parameters<typeof test.client.startProcess>[0]["spec"], string]> = [
      [{ command: "x".repeat(maxArgumentBytes + 1) }, `command is longer than ${maxArgumentBytes} bytes`],
      [
        { command: "echo", args: ["y".repeat(maxArgumentBytes + 1)] },
        `an argument is longer than ${maxArgumentBytes} bytes`,
      ],
      [
        { command: "true", env: { BIG: "z".repeat(maxArgumentBytes) } },
        `environment variable BIG is longer than ${maxArgumentBytes} bytes`,
      ],
      [
        {
          command: "true",
          env: Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`V${i}`, "v".repeat(120 * 1024)])),
        },
        "command, arguments and environment together are longer than 1048576 bytes",
      ],
      [{ command: "pwd", cwd: "d".repeat(maxPathBytes + 1) }, `working directory is longer than ${maxPathBytes} bytes`],
      [{ command: "true", pty: { term: "xterm\0evil" } }, "pty term contains a control character or a space"],
      [{ command: "true", pty: { term: "t".repeat(65) } }, "pty term is longer than 64 characters"],
    ];
    for (const [spec, message] of cases) {
      const error = await rpcError(test.client.startProcess({ spec }));
      expect(error.code, message).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toBe(message);
    }
    expect(test.server.manager.list()).toHaveLength(0);
  });

  it("stdin_data over the stdin bound is refused up front, not swallowed", async () => {
    const error = await streamError(
      test.client.exec({ spec: { command: "cat", stdinData: new Uint8Array(maxPendingInputBytes + 1) } }),
    );
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toBe(
      `stdin_data is larger than the ${maxPendingInputBytes} bytes a process may have pending on stdin`,
    );
    const fits = await collectExec(test.client, {
      command: "wc",
      args: ["-c"],
      stdinData: new Uint8Array(maxPendingInputBytes),
    });
    expect(fits.stdout.toString().trim()).toBe(String(maxPendingInputBytes));
  });

  it("a directory given as the program exits 126, as a shell says", async () => {
    const result = await collectExec(test.client, { command: test.workspace, args: ["x"] });
    expect(result.exited.exitCode).toBe(126);
    expect(result.exited.error).toBe(`is a directory: ${test.workspace}`);
  });

  it("an unknown status name in a Connect JSON filter is refused, not dropped", async () => {
    const response = await fetch(`${test.server.url}/sandbox.v1.SandboxService/ListProcesses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ statuses: ["PROCESS_STATUS_NOPE"] }),
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ code: "invalid_argument" });
    const json = createClient(
      SandboxService,
      createConnectTransport({ baseUrl: test.server.url, httpVersion: "1.1", useBinaryFormat: false }),
    );
    expect((await json.listProcesses({})).processes).toHaveLength(test.server.manager.list().length);
  });
});

describe("a request that is not valid protobuf is INVALID_ARGUMENT in every protocol, not INTERNAL", () => {
  let test: TestServer;
  beforeAll(async () => {
    test = await startTestServer();
  });
  afterAll(() => test.close());

  /** A GetProcessRequest whose process_id claims 16 bytes and has 1, and one whose process_id is not UTF-8. */
  const truncated = Buffer.from([0x0a, 0x10, 0x01]);
  const notUtf8 = Buffer.from([0x0a, 0x02, 0xff, 0xfe]);
  const envelope = (flags: number, message: Buffer) => {
    const prefix = Buffer.alloc(5);
    prefix[0] = flags;
    prefix.writeUInt32BE(message.length, 1);
    return Buffer.concat([prefix, message]);
  };

  for (const [name, message] of [
    ["truncated", truncated],
    ["invalid UTF-8", notUtf8],
  ] as const) {
    it(`${name}: gRPC-Web, Connect unary and Connect streaming`, async () => {
      const grpcWeb = await fetch(`${test.server.url}/sandbox.v1.SandboxService/GetProcess`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web+proto" },
        body: envelope(0, message),
      });
      const grpcWebBody = Buffer.from(await grpcWeb.arrayBuffer());
      const trailer = grpcWebBody.subarray(grpcWebBody.indexOf(0x80) + 5).toString();
      expect(grpcWeb.headers.get("grpc-status") ?? /grpc-status: ?(\d+)/.exec(trailer)?.[1]).toBe(
        String(Code.InvalidArgument),
      );
      // With the ErrorInfo every failure carries, in each protocol's place for details.
      const details =
        grpcWeb.headers.get("grpc-status-details-bin") ?? /grpc-status-details-bin: ?([^\r]+)/.exec(trailer)?.[1];
      const status = fromBinary(StatusSchema, Buffer.from(details ?? "", "base64"));
      expect([status.code, anyUnpack(status.details[0], ErrorInfoSchema)?.reason]).toEqual([
        Code.InvalidArgument,
        "INVALID_ARGUMENT",
      ]);

      const unary = await fetch(`${test.server.url}/sandbox.v1.SandboxService/GetProcess`, {
        method: "POST",
        headers: { "content-type": "application/proto" },
        body: message,
      });
      expect(unary.status).toBe(400);
      expect(await unary.json()).toMatchObject({
        code: "invalid_argument",
        details: [{ type: "google.rpc.ErrorInfo", debug: { reason: "INVALID_ARGUMENT", domain: "sandbox.v1" } }],
      });

      const streaming = await fetch(`${test.server.url}/sandbox.v1.SandboxService/Exec`, {
        method: "POST",
        headers: { "content-type": "application/connect+proto" },
        body: envelope(0, Buffer.from([0x0a, 0x03, 0x0a, 0x10, 0x01])),
      });
      const frames = Buffer.from(await streaming.arrayBuffer());
      const end = JSON.parse(frames.subarray(5).toString()) as { error?: { code: string } };
      expect(end.error).toMatchObject({
        code: "invalid_argument",
        details: [{ type: "google.rpc.ErrorInfo", debug: { reason: "INVALID_ARGUMENT" } }],
      });
      expect(test.server.manager.list()).toHaveLength(0);
    });
  }
});
