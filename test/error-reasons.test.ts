import { chmodSync, mkdirSync } from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import path from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../gen/google/rpc/status_pb.js";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { ErrorReason, SandboxService, type SendInputRequestSchema } from "../gen/sandbox/v1/sandbox_pb.js";
import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { resolveUser } from "../src/process/index.js";
import { expectReason } from "./support/errors.js";
import { waitFor } from "./support/processes.js";
import { Code, rpcError, sleepMarker, streamError, waitForExit } from "./support/rpc.js";
import { bearer, startTestServer, type TestServer } from "./support/server.js";
import { parseJsonStream, runCommand, tool } from "./support/tools.js";

type InputMessage = MessageInitShape<typeof SendInputRequestSchema>;
async function* inputs(...messages: InputMessage[]): AsyncGenerator<InputMessage> {
  for (const message of messages) yield message;
}
const open = (processId: string): InputMessage => ({ input: { case: "open", value: { processId } } });

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

/** Drains a SendInput call; resolves with its error. */
function sendInputError(...messages: InputMessage[]) {
  return streamError(t.client.sendInput(inputs(...messages)));
}

describe("every reason in the proto, from a real call against a real server (code, ErrorInfo reason and metadata)", () => {
  it("PROCESS_NOT_FOUND names the process, from every call that takes one", async () => {
    const processId = "no-such-process";
    const expected = {
      code: Code.NotFound,
      reason: "PROCESS_NOT_FOUND",
      metadata: { process_id: processId },
      message: `process not found: ${processId}`,
    };
    expectReason(await rpcError(t.client.getProcess({ processId })), expected);
    expectReason(await rpcError(t.client.killProcess({ processId })), expected);
    expectReason(await rpcError(t.client.getProcessLogs({ processId })), expected);
    expectReason(await streamError(t.client.streamLogs({ processId, follow: true })), expected);
    expectReason(await sendInputError(open(processId)), expected);
  });

  it("PROCESS_ALREADY_EXISTS names the id of the live process", async () => {
    const processId = "reasons-duplicate";
    await t.client.startProcess({ spec: { command: "sleep", args: [sleepMarker(30)], processId } });
    try {
      const expected = {
        code: Code.AlreadyExists,
        reason: "PROCESS_ALREADY_EXISTS",
        metadata: { process_id: processId },
      };
      expectReason(await rpcError(t.client.startProcess({ spec: { command: "true", processId } })), expected);
      expectReason(await streamError(t.client.exec({ spec: { command: "true", processId } })), expected);
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });

  it("INVALID_ARGUMENT names the field at fault", async () => {
    const invalid = (field: string, message: string | RegExp) => ({
      code: Code.InvalidArgument,
      reason: "INVALID_ARGUMENT",
      metadata: { field },
      message,
    });
    expectReason(await streamError(t.client.exec({ spec: { command: " " } })), invalid("command", "command is empty"));
    expectReason(await rpcError(t.client.startProcess({})), invalid("spec", "spec is required"));
    expectReason(
      await rpcError(t.client.startProcess({ spec: { command: "true", timeoutMs: -5 } })),
      invalid("timeout_ms", /timeout must be/),
    );
    expectReason(
      await rpcError(t.client.startProcess({ spec: { command: "true", processId: "a/b" } })),
      invalid("process_id", /slash/),
    );
    expectReason(
      await rpcError(t.client.startProcess({ spec: { command: "true", pty: { cols: 10_001 } } })),
      invalid("pty", /pty size/),
    );
    expectReason(
      await rpcError(t.client.getProcess({ processId: "" })),
      invalid("process_id", "process_id is required"),
    );
    expectReason(await rpcError(t.client.killAllProcesses({ signal: "SIGNOPE" })), invalid("signal", "unknown signal"));
    expectReason(await rpcError(t.client.listProcesses({ sessionId: "a\nb" })), invalid("session_id", /session id/));
    expectReason(
      await rpcError(t.client.listProcesses({ pageToken: "bm90IGEgdG9rZW4" })),
      invalid("page_token", /invalid page_token/),
    );
    expectReason(await rpcError(t.client.listProcesses({ pageSize: -1 })), invalid("page_size", /page_size/));
    expectReason(
      await sendInputError({ input: { case: "data", value: new Uint8Array([1]) } }),
      invalid("open", /must be open/),
    );
    const { process } = await t.client.startProcess({ spec: { command: "cat", pty: {} } });
    try {
      const resize = await sendInputError(open(process!.processId), {
        input: { case: "resize", value: { cols: 0, rows: 10 } },
      });
      expectReason(resize, invalid("resize", /resize needs cols and rows between 1 and 10000, got 0x10/));
    } finally {
      await t.client.killProcess({ processId: process!.processId, signal: "SIGKILL" });
    }
  });

  it("CWD_OUTSIDE_WORKSPACE and CWD_NOT_FOUND name the working directory as asked", async () => {
    for (const cwd of ["/etc", ".."]) {
      expectReason(await streamError(t.client.exec({ spec: { command: "true", cwd } })), {
        code: Code.PermissionDenied,
        reason: "CWD_OUTSIDE_WORKSPACE",
        metadata: { cwd, roots: t.workspace },
      });
    }
    expectReason(await rpcError(t.client.startProcess({ spec: { command: "true", cwd: "missing/dir" } })), {
      code: Code.FailedPrecondition,
      reason: "CWD_NOT_FOUND",
      metadata: { cwd: "missing/dir", errno: "ENOENT" },
      message: "working directory not found: missing/dir",
    });
  });

  it("SUDO_NOT_ALLOWED", async () => {
    expectReason(await streamError(t.client.exec({ spec: { command: "id -u", sudo: true } })), {
      code: Code.PermissionDenied,
      reason: "SUDO_NOT_ALLOWED",
      message: "sudo is not allowed by this daemon",
    });
  });

  it("STDIN_NOT_OPEN, PROCESS_NOT_RUNNING and PTY_NOT_OPEN name the process", async () => {
    const { process: noStdin } = await t.client.startProcess({ spec: { command: "sleep", args: [sleepMarker(30)] } });
    const { process: piped } = await t.client.startProcess({
      spec: { command: "cat", stdin: true, autoCleanup: false },
    });
    const { process: done } = await t.client.startProcess({
      spec: { command: "true", stdin: true, autoCleanup: false },
    });
    try {
      const of = (processId: string) => ({ process_id: processId });
      expectReason(await sendInputError(open(noStdin!.processId)), {
        code: Code.FailedPrecondition,
        reason: "STDIN_NOT_OPEN",
        metadata: of(noStdin!.processId),
        message: /has no stdin/,
      });
      expectReason(
        await sendInputError(open(piped!.processId), { input: { case: "resize", value: { cols: 80, rows: 24 } } }),
        {
          code: Code.FailedPrecondition,
          reason: "PTY_NOT_OPEN",
          metadata: of(piped!.processId),
        },
      );
      const afterClose = await sendInputError(
        open(piped!.processId),
        { input: { case: "close", value: {} } },
        { input: { case: "data", value: new Uint8Array([1]) } },
      );
      expectReason(afterClose, {
        code: Code.FailedPrecondition,
        reason: "STDIN_NOT_OPEN",
        metadata: of(piped!.processId),
        message: /is closed/,
      });
      await waitForExit(t.client, done!.processId);
      expectReason(await sendInputError(open(done!.processId)), {
        code: Code.FailedPrecondition,
        reason: "PROCESS_NOT_RUNNING",
        metadata: of(done!.processId),
        message: `process has exited: ${done!.processId}`,
      });
    } finally {
      await t.client.killAllProcesses({ signal: "SIGKILL" });
    }
  });

  it("OFFSET_OUT_OF_RANGE names the offset field, the offset and the bytes written", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "printf 12345", autoCleanup: false } });
    await waitForExit(t.client, process!.processId);
    expectReason(await streamError(t.client.streamLogs({ processId: process!.processId, stdoutOffset: 6n })), {
      code: Code.OutOfRange,
      reason: "OFFSET_OUT_OF_RANGE",
      metadata: { field: "stdout_offset", offset: "6", written: "5" },
    });
  });

  it("SERVICE_NOT_FOUND for a health check of an unknown service", async () => {
    const health = t.connect(Health);
    expectReason(await rpcError(health.check({ service: "nope.v1.Nope" })), {
      code: Code.NotFound,
      reason: "SERVICE_NOT_FOUND",
      metadata: { service: "nope.v1.Nope" },
    });
  });

  it("LIMIT_EXCEEDED names the daemon flag and its value: max-processes, max-calls-per-connection, max-calls, max-message-bytes", async () => {
    const limited = await startTestServer({
      maxProcesses: 1,
      maxMessageBytes: 64 * 1024,
      callLimits: { maxCallsPerConnection: 1, maxCalls: 2 },
    });
    try {
      await limited.client.startProcess({ spec: { command: "sleep", args: [sleepMarker(30)], processId: "only" } });
      expectReason(await rpcError(limited.client.startProcess({ spec: { command: "true" } })), {
        code: Code.ResourceExhausted,
        reason: "LIMIT_EXCEEDED",
        metadata: { limit: "max-processes", value: "1" },
      });
      // One follow holds the connection's one call; the next call on it is refused.
      // Ending a follow takes its signal: letting go of the iterator does not cancel the call.
      const follows = new AbortController();
      const following = limited.client
        .streamLogs({ processId: "only", follow: true }, { signal: follows.signal })
        [Symbol.asyncIterator]();
      await following.next();
      expectReason(await rpcError(limited.client.getProcess({ processId: "only" })), {
        code: Code.ResourceExhausted,
        reason: "LIMIT_EXCEEDED",
        metadata: { limit: "max-calls-per-connection", value: "1" },
      });
      const second = limited.connect();
      const secondFollow = second
        .streamLogs({ processId: "only", follow: true }, { signal: follows.signal })
        [Symbol.asyncIterator]();
      await secondFollow.next();
      expectReason(await rpcError(limited.connect().getProcess({ processId: "only" })), {
        code: Code.ResourceExhausted,
        reason: "LIMIT_EXCEEDED",
        metadata: { limit: "max-calls", value: "2" },
      });
      follows.abort();
      await Promise.allSettled([following.next(), secondFollow.next()]);
      await waitFor(() => limited.server.activeCalls === 0, { what: "the follows to end" });
      // Refused by connect-es itself, before the service: the net gives it the flag's name.
      expectReason(await rpcError(limited.connect().startProcess({ spec: { command: "x".repeat(70 * 1024) } })), {
        code: Code.ResourceExhausted,
        reason: "LIMIT_EXCEEDED",
        metadata: { limit: "max-message-bytes", value: String(64 * 1024) },
      });
    } finally {
      await limited.client.killAllProcesses({ signal: "SIGKILL" }).catch(() => {});
      await limited.close();
    }
  });

  it("SHUTTING_DOWN ends the streams in progress and refuses new starts (UNAVAILABLE)", async () => {
    const closing = await startTestServer();
    try {
      await closing.client.startProcess({ spec: { command: "trap '' TERM; sleep 30", processId: "stubborn" } });
      const follow = streamError(closing.client.streamLogs({ processId: "stubborn", follow: true }));
      await waitFor(() => closing.server.activeCalls === 1, { what: "the follow to be in progress" });
      const closed = closing.server.close(1000);
      const expected = { code: Code.Unavailable, reason: "SHUTTING_DOWN", message: "the daemon is shutting down" };
      expectReason(await follow, expected);
      expectReason(await rpcError(closing.client.startProcess({ spec: { command: "true" } })), expected);
      await closed;
    } finally {
      await closing.close();
    }
  });

  it("UNAUTHENTICATED, answered by the gate before the body is read, in gRPC, gRPC-Web and Connect", async () => {
    const guarded = await startTestServer({ token: "reasons-token" });
    try {
      const transports: [string, Transport][] = [
        ["connect", createConnectTransport({ baseUrl: guarded.server.url, httpVersion: "1.1" })],
        ["grpc-web", createGrpcWebTransport({ baseUrl: guarded.server.url, httpVersion: "1.1" })],
      ];
      const clients = [
        ["grpc", guarded.client] as const,
        ...transports.map(([name, transport]) => [name, createClient(SandboxService, transport)] as const),
      ];
      for (const [name, client] of clients) {
        const expected = { code: Code.Unauthenticated, reason: "UNAUTHENTICATED", message: "missing bearer token" };
        expectReason(await rpcError(client.getProcess({ processId: "x" })), expected);
        expectReason(await streamError(client.streamLogs({ processId: "x" })), expected);
        void name;
      }
      const wrong = guarded.connect(SandboxService, { interceptors: [bearer("wrong")] });
      expectReason(await rpcError(wrong.listProcesses({})), {
        code: Code.Unauthenticated,
        reason: "UNAUTHENTICATED",
        message: "invalid bearer token",
      });
    } finally {
      await guarded.close();
    }
  });

  it("HOST_NOT_ALLOWED names the host a tokenless daemon refused (Connect JSON over HTTP/1.1)", async () => {
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const request = http.request(`${t.server.url}/sandbox.v1.SandboxService/ListProcesses`, {
        method: "POST",
        headers: { host: "rebound.example:7007", "content-type": "application/json" },
      });
      request.on("response", (response) => {
        let body = "";
        response.on("data", (chunk: Buffer) => (body += chunk.toString()));
        response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
      });
      request.on("error", reject);
      request.end("{}");
    });
    expect(answer.status).toBe(403);
    const json = JSON.parse(answer.body) as { code: string; details: { type: string; debug: unknown }[] };
    expect(json.code).toBe("permission_denied");
    expect(json.details.map((detail) => [detail.type, detail.debug])).toEqual([
      [
        "google.rpc.ErrorInfo",
        { reason: "HOST_NOT_ALLOWED", domain: "sandbox.v1", metadata: { host: "rebound.example" } },
      ],
    ]);
  });

  it("PROTOCOL_ERROR for what connect-es refuses before the service (an unknown compression), and INVALID_ARGUMENT for a request it cannot parse", async () => {
    const session = http2.connect(t.server.url);
    try {
      const call = (headers: http2.OutgoingHttpHeaders, body: Buffer) =>
        new Promise<http2.IncomingHttpHeaders>((resolve) => {
          let status: http2.IncomingHttpHeaders = {};
          const stream = session.request({
            ":method": "POST",
            ":path": "/sandbox.v1.SandboxService/GetProcess",
            "content-type": "application/grpc",
            te: "trailers",
            ...headers,
          });
          stream.on("response", (response) => (status = { ...status, ...response }));
          stream.on("trailers", (trailers) => (status = { ...status, ...trailers }));
          stream.on("data", () => {});
          stream.on("close", () => resolve(status));
          stream.end(body);
        });
      const reasonOf = (headers: http2.IncomingHttpHeaders) => {
        const status = fromBinary(StatusSchema, Buffer.from(String(headers["grpc-status-details-bin"]), "base64"));
        const info = anyUnpack(status.details[0], ErrorInfoSchema);
        return { grpcStatus: headers["grpc-status"], code: status.code, reason: info?.reason, domain: info?.domain };
      };
      const compressed = await call({ "grpc-encoding": "snappy" }, Buffer.from([1, 0, 0, 0, 1, 0]));
      expect(reasonOf(compressed)).toEqual({
        grpcStatus: String(Code.Unimplemented),
        code: Code.Unimplemented,
        reason: "PROTOCOL_ERROR",
        domain: "sandbox.v1",
      });
      // A truncated string field: connect-es says INTERNAL "parse binary", the daemon INVALID_ARGUMENT.
      const truncated = await call({}, Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x05, 0x61]));
      expect(reasonOf(truncated)).toEqual({
        grpcStatus: String(Code.InvalidArgument),
        code: Code.InvalidArgument,
        reason: "INVALID_ARGUMENT",
        domain: "sandbox.v1",
      });
    } finally {
      session.close();
    }
  });

  it.skipIf(process.getuid?.() !== 0)(
    "CWD_NOT_ACCESSIBLE when the command's user may not enter the directory",
    async () => {
      const switched = await startTestServer(
        { runAs: resolveUser("nobody"), token: "reasons-token" },
        { sendToken: true },
      );
      try {
        chmodSync(switched.workspace, 0o755);
        mkdirSync(path.join(switched.workspace, "private"), { mode: 0o700 });
        expectReason(await streamError(switched.client.exec({ spec: { command: "true", cwd: "private" } })), {
          code: Code.PermissionDenied,
          reason: "CWD_NOT_ACCESSIBLE",
          metadata: { cwd: "private", errno: "EACCES" },
        });
      } finally {
        await switched.close();
      }
    },
  );

  it("covers every reason of the proto a client can receive (CANCELED reaches no client; INTERNAL, DEADLINE_EXCEEDED and SPAWN_FAILED have no safe trigger)", () => {
    // The reasons above, plus STATE_NOT_RECORDED in security-ledger.test.ts and RETENTION_ABOVE_LIMIT in
    // output-head-tail.test.ts.
    const tested = [
      "PROCESS_NOT_FOUND",
      "PROCESS_ALREADY_EXISTS",
      "LIMIT_EXCEEDED",
      "INVALID_ARGUMENT",
      "CWD_OUTSIDE_WORKSPACE",
      "SUDO_NOT_ALLOWED",
      "PROCESS_NOT_RUNNING",
      "STDIN_NOT_OPEN",
      "UNAUTHENTICATED",
      "SHUTTING_DOWN",
      "CWD_NOT_FOUND",
      "CWD_NOT_ACCESSIBLE",
      "PTY_NOT_OPEN",
      "OFFSET_OUT_OF_RANGE",
      "HOST_NOT_ALLOWED",
      "STATE_NOT_RECORDED",
      "SERVICE_NOT_FOUND",
      "PROTOCOL_ERROR",
      "RETENTION_ABOVE_LIMIT",
    ];
    const untested = ["CANCELED", "INTERNAL", "DEADLINE_EXCEEDED", "SPAWN_FAILED"];
    // The file service's reasons, each triggered in test/files-errors.test.ts.
    const files = [
      "PATH_NOT_FOUND",
      "PATH_ALREADY_EXISTS",
      "PATH_OUTSIDE_WORKSPACE",
      "PATH_NOT_ACCESSIBLE",
      "IS_A_DIRECTORY",
      "NOT_A_DIRECTORY",
      "DIRECTORY_NOT_EMPTY",
      "NOT_A_REGULAR_FILE",
      "STORAGE_EXHAUSTED",
      "CONTENT_MISMATCH",
      "CROSS_DEVICE",
      "WORKSPACE_ROOT",
      "READ_ONLY_FILESYSTEM",
      "SYMLINK_LOOP",
      "FILE_BUSY",
      "FILE_SERVICE_UNAVAILABLE",
    ];
    // The readiness reasons, each triggered in test/readiness.test.ts (PORTS_UNAVAILABLE without /proc/net).
    const readiness = ["WAIT_TIMED_OUT", "PROCESS_EXITED", "PATTERN_INVALID", "PORTS_UNAVAILABLE"];
    // Per-command limits, each triggered in test/cgroup-limits.test.ts.
    const limits = ["LIMIT_ABOVE_CAP", "LIMIT_NOT_ENFORCEABLE"];
    const names = Object.keys(ErrorReason).filter((name) => Number.isNaN(Number(name)) && name !== "UNSPECIFIED");
    expect([...tested, ...untested, ...files, ...readiness, ...limits].sort()).toEqual(names.sort());
  });
});

describe("grpcurl prints the reason", () => {
  it("shows the ErrorInfo (reason, domain, metadata) with -format-error, resolved through reflection", async () => {
    const result = await runCommand(tool("grpcurl"), [
      "-plaintext",
      "-format-error",
      "-d",
      '{"process_id":"grpcurl-missing"}',
      `127.0.0.1:${t.server.port}`,
      "sandbox.v1.SandboxService/GetProcess",
    ]);
    expect(result.code).not.toBe(0);
    expect(parseJsonStream(result.stdout + result.stderr)).toEqual([
      {
        code: Code.NotFound,
        message: "process not found: grpcurl-missing",
        details: [
          {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            reason: "PROCESS_NOT_FOUND",
            domain: "sandbox.v1",
            metadata: { process_id: "grpcurl-missing" },
          },
        ],
      },
    ]);
  });
});
