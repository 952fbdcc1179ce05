import http2 from "node:http2";
import net from "node:net";
import { ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { Code, collectExec, type SandboxClient } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

/** Runs per property; CI's default. SANDBOXD_FUZZ_RUNS raises it for a longer local run. */
const runs = Number(process.env.SANDBOXD_FUZZ_RUNS ?? 150);
let inputsTried = 0;
let connectionRefusals = 0;

const int32 = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });
const uint32 = fc.integer({ min: 0, max: 2 ** 32 - 1 });
const uint64 = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });
const text = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.constantFrom(
    "",
    " ",
    "\0",
    "a\0b",
    "..",
    "../..",
    "/",
    "/etc",
    "\u{10FFFF}",
    "\uD800",
    "SIGKILL",
    "9",
    "-1",
    "SIGNOPE",
    "x".repeat(300),
  ),
);
const bigText = fc.oneof(text, fc.constant("y".repeat(1_000_000)));
/** Programs that end at once whatever their arguments; never a shell line made of random text. */
const safeCommand = fc.oneof(
  fc.constantFrom("true", "false", "printf", "echo", "/bin/true", "./missing-program", "no-such-program-sandboxd"),
  text.map((name) => `no-such-${name}`),
);
const spec = fc.record(
  {
    command: safeCommand,
    args: fc.array(text, { maxLength: 4 }),
    env: fc.dictionary(text, text, { maxKeys: 3 }),
    cwd: text,
    timeoutMs: fc.oneof(int32, fc.constantFrom(0, 1, 2 ** 31 - 1, -1)),
    processId: text,
    sessionId: text,
    pty: fc.option(fc.record({ cols: uint32, rows: uint32, term: text }), { nil: undefined }),
    stdin: fc.boolean(),
    stdinData: fc.uint8Array({ maxLength: 64 }),
    autoCleanup: fc.option(fc.boolean(), { nil: undefined }),
    sudo: fc.boolean(),
  },
  { requiredKeys: [] },
);
const processId = fc.oneof(text, fc.uuid());

/** Every RPC of the service with random and boundary requests. */
const calls = {
  exec: fc
    .record({ spec: fc.option(spec, { nil: undefined }) })
    .map(
      (request) => (client: SandboxClient, signal: AbortSignal) =>
        drain(client.exec(request, { signal, timeoutMs: 5000 })),
    ),
  startProcess: fc
    .record({ spec: fc.option(spec, { nil: undefined }) })
    .map((request) => (client: SandboxClient) => client.startProcess(request)),
  streamLogs: fc
    .record({ processId, stdoutOffset: uint64, stderrOffset: uint64, follow: fc.boolean() })
    .map(
      (request) => (client: SandboxClient, signal: AbortSignal) =>
        drain(client.streamLogs(request, { signal, timeoutMs: 1000 })),
    ),
  sendInput: fc
    .array(
      fc.oneof(
        fc.record({ case: fc.constant("open" as const), value: fc.record({ processId }) }),
        fc.record({ case: fc.constant("data" as const), value: fc.uint8Array({ maxLength: 64 }) }),
        fc.record({ case: fc.constant("close" as const), value: fc.constant({}) }),
        fc.record({
          case: fc.constant("resize" as const),
          value: fc.record({ cols: uint32, rows: uint32, term: text }),
        }),
        fc.record({ case: fc.constant("signal" as const), value: text }),
        fc.constant({ case: undefined }),
      ),
      { maxLength: 5 },
    )
    .map(
      (inputs) => (client: SandboxClient, signal: AbortSignal) =>
        drain(
          client.sendInput(
            (async function* () {
              for (const input of inputs) yield { input } as never;
            })(),
            { signal, timeoutMs: 2000 },
          ),
        ),
    ),
  getProcess: fc.record({ processId: bigText }).map((request) => (client: SandboxClient) => client.getProcess(request)),
  listProcesses: fc
    .record({ sessionId: text, statuses: fc.array(fc.integer({ min: -3, max: 1000 }), { maxLength: 5 }) })
    .map((request) => (client: SandboxClient) => client.listProcesses(request as never)),
  killProcess: fc
    .record({ processId, signal: text, gracePeriodMs: int32 })
    .map((request) => (client: SandboxClient) => client.killProcess(request)),
  killAllProcesses: fc
    .record({ sessionId: fc.oneof(text, fc.constant("fuzz-session-never-used")), signal: text, gracePeriodMs: int32 })
    // Only a session nobody uses: killing everything would kill the other properties' fixtures.
    .map(
      (request) => (client: SandboxClient) =>
        client.killAllProcesses({ ...request, sessionId: `fuzz-${request.sessionId}` }),
    ),
  cleanupProcesses: fc
    .record({ sessionId: text })
    .map((request) => (client: SandboxClient) => client.cleanupProcesses(request)),
  getProcessLogs: fc.record({ processId }).map((request) => (client: SandboxClient) => client.getProcessLogs(request)),
  // The waits get a short time limit of their own: a random request may be one that waits.
  waitForPort: fc
    .record({
      port: uint32,
      host: fc.constantFrom("", "127.0.0.1", "::1", "no-such-host.invalid"),
      http: fc.option(fc.record({ path: text, minStatus: uint32, maxStatus: uint32 }), { nil: undefined }),
      processId: fc.oneof(processId, fc.constant("")),
      timeoutMs: fc.integer({ min: 0, max: 300 }),
      intervalMs: uint32,
    })
    .map(
      (request) => (client: SandboxClient) =>
        client.waitForPort({ ...request, timeoutMs: request.timeoutMs || 300 }, { timeoutMs: 5000 }),
    ),
  waitForLog: fc
    .record({
      processId,
      pattern: fc.oneof(text, fc.constantFrom("(a+)+$", "(a)\\1", "(?<=x)y", "[", "\\")),
      stream: fc.integer({ min: -1, max: 4 }),
      stdoutOffset: uint64,
      stderrOffset: uint64,
      timeoutMs: fc.integer({ min: 1, max: 300 }),
    })
    .map((request) => (client: SandboxClient) => client.waitForLog(request as never, { timeoutMs: 5000 })),
  waitForExit: fc
    .record({ processId, timeoutMs: fc.integer({ min: 1, max: 300 }) })
    .map((request) => (client: SandboxClient) => client.waitForExit(request, { timeoutMs: 5000 })),
  listPorts: fc.record({ processId }).map((request) => (client: SandboxClient) => client.listPorts(request)),
};

/** Codes a refusal may carry; INTERNAL or UNKNOWN would mean an unhandled failure in a handler. */
const acceptedCodes = new Set([
  Code.InvalidArgument,
  Code.NotFound,
  Code.AlreadyExists,
  Code.FailedPrecondition,
  Code.PermissionDenied,
  Code.ResourceExhausted,
  Code.OutOfRange,
  Code.DeadlineExceeded,
  Code.Canceled,
  Code.Unavailable,
  // An unknown method, or a stream without its request message (connect's "protocol error").
  Code.Unimplemented,
]);

/**
 * Whether a status is a deliberate answer. connect-es (like grpc-go) answers a message it cannot
 * decode with INTERNAL and a message saying why ("parse binary: ...", "received compressed
 * envelope..."); only a failure nobody handled reads "internal error" or, from sandboxd's own
 * fallback, "unexpected failure: ...".
 */
function isHandled(code: Code, message: string): boolean {
  if (acceptedCodes.has(code)) return true;
  return code === Code.Internal && message !== "internal error" && !message.startsWith("unexpected failure");
}

async function drain(stream: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of stream) {
    // Drain.
  }
}

describe("fuzz: random and boundary messages to every RPC", () => {
  let test: TestServer;
  beforeAll(async () => {
    test = await startTestServer({ maxMessageBytes: 256 * 1024 });
  });
  afterAll(async () => {
    await test.client.killAllProcesses({ signal: "SIGKILL" }).catch(() => {});
    console.log(
      `fuzz: ${inputsTried} inputs tried against one server, which answered every one and kept serving ` +
        `(${connectionRefusals} answered by refusing the misbehaving connection)`,
    );
    await test.close();
  });

  for (const [name, arbitrary] of Object.entries(calls)) {
    it(`${name} answers every input with a response or a status, then serves a good call`, async () => {
      // A connection of its own: the server may give up on a connection that misbehaves (HTTP/2
      // ENHANCE_YOUR_CALM, REFUSED_STREAM), and the good call afterwards proves that others are served.
      let sessionManager = new Http2SessionManager(test.server.url);
      let fuzzClient = createClient(SandboxService, createGrpcTransport({ baseUrl: test.server.url, sessionManager }));
      await fc.assert(
        fc.asyncProperty(arbitrary, async (call) => {
          inputsTried++;
          const abort = new AbortController();
          try {
            await (call as (client: SandboxClient, signal: AbortSignal) => Promise<unknown>)(fuzzClient, abort.signal);
          } catch (error) {
            const connectError = ConnectError.from(error);
            if (/NGHTTP2_(ENHANCE_YOUR_CALM|REFUSED_STREAM)/.test(connectError.rawMessage)) {
              connectionRefusals++;
              sessionManager.abort();
              sessionManager = new Http2SessionManager(test.server.url);
              fuzzClient = createClient(
                SandboxService,
                createGrpcTransport({ baseUrl: test.server.url, sessionManager }),
              );
              return;
            }
            if (!isHandled(connectError.code, connectError.rawMessage)) {
              throw new Error(`${name}: unexpected ${Code[connectError.code]}: ${connectError.rawMessage}`, {
                cause: error,
              });
            }
          } finally {
            abort.abort();
          }
        }),
        { numRuns: runs, interruptAfterTimeLimit: 20_000 },
      );
      sessionManager.abort();
      await test.client.killAllProcesses({ signal: "SIGKILL" });
      const good = await collectExec(test.client, { command: "echo still-serving" });
      expect(good.stdout.toString()).toBe("still-serving\n");
    }, 40_000);
  }

  it("raw gRPC bodies (random protobuf, invalid UTF-8, bad envelopes) get a status or a reset, never a crash", async () => {
    const methods = [
      "Exec",
      "StartProcess",
      "StreamLogs",
      "SendInput",
      "GetProcess",
      "ListProcesses",
      "KillProcess",
      "KillAllProcesses",
      "CleanupProcesses",
      "GetProcessLogs",
      "WaitForExit",
      "ListPorts",
      "NoSuchMethod",
    ];
    const invalidUtf8 = Buffer.from([0x0a, 0x04, 0xff, 0xfe, 0xc0, 0x80]);
    const body = fc.oneof(
      fc.uint8Array({ maxLength: 200 }).map((payload) => envelope(Buffer.from(payload))),
      fc.constant(envelope(invalidUtf8)),
      fc.constant(
        envelope(
          Buffer.concat([
            Buffer.from([0x0a, 0x08]),
            invalidUtf8.subarray(0, 2),
            Buffer.from("abc"),
            Buffer.from([0xed, 0xa0, 0x80]),
          ]),
        ),
      ),
      fc.uint8Array({ maxLength: 40 }).map((bytes) => Buffer.from(bytes)),
      // An envelope claiming 2 GiB, a compressed flag without compression, a truncated one.
      fc.constant(Buffer.from([0, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3])),
      fc.constant(Buffer.from([1, 0, 0, 0, 3, 1, 2, 3])),
      fc.constant(Buffer.from([0, 0, 0, 0, 9, 1])),
    );
    const session = http2.connect(test.server.url);
    session.on("error", () => {});
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...methods),
          body,
          fc.constantFrom("application/grpc", "application/grpc+json", "application/json", "text/plain"),
          async (method, payload, contentType) => {
            inputsTried++;
            const { status, message } = await rawCall(
              session,
              `/sandbox.v1.SandboxService/${method}`,
              contentType,
              payload,
            );
            const handled =
              status === "reset" ||
              status === "0" ||
              (Number.isInteger(Number(status)) && isHandled(Number(status), message));
            expect(handled, `${method} ${contentType}: status ${status} ${message}`).toBe(true);
          },
        ),
        { numRuns: runs * 2, interruptAfterTimeLimit: 20_000 },
      );
    } finally {
      session.close();
    }
    await test.client.killAllProcesses({ signal: "SIGKILL" });
    expect((await collectExec(test.client, { command: "echo after-raw" })).stdout.toString()).toBe("after-raw\n");
  }, 40_000);

  it("random bytes straight at the port close that connection only", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.uint8Array({ minLength: 1, maxLength: 2000 }),
          fc
            .uint8Array({ maxLength: 500 })
            .map((bytes) => Buffer.concat([Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), bytes])),
          fc
            .uint8Array({ maxLength: 500 })
            .map((bytes) =>
              Buffer.concat([Buffer.from("POST /sandbox.v1.SandboxService/Exec HTTP/1.1\r\nHost: x\r\n\r\n"), bytes]),
            ),
        ),
        async (bytes) => {
          inputsTried++;
          await new Promise<void>((resolve) => {
            const socket = net.connect(test.server.port, "127.0.0.1", () => socket.write(bytes));
            const done = () => {
              clearTimeout(timer);
              socket.destroy();
              resolve();
            };
            // The server either closes the connection or waits for more: both are fine.
            const timer = setTimeout(done, 50);
            socket.on("close", done);
            socket.on("error", done);
            socket.on("data", () => {});
          });
        },
      ),
      { numRuns: runs * 2, interruptAfterTimeLimit: 20_000 },
    );
    expect((await collectExec(test.client, { command: "echo after-bytes" })).stdout.toString()).toBe("after-bytes\n");
    await waitForConnectionsToDrain(test);
  }, 60_000);
});

function envelope(payload: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}

/** Sends one raw request; resolves with its grpc-status and grpc-message, or status "reset". */
function rawCall(
  session: http2.ClientHttp2Session,
  path: string,
  contentType: string,
  body: Buffer,
): Promise<{ status: string; message: string }> {
  return new Promise((resolve) => {
    let status: string | undefined;
    let message = "";
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": contentType,
      te: "trailers",
      "grpc-timeout": "2S",
    });
    const timer = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), 3000);
    stream.on("response", (headers) => {
      const grpc = headers["grpc-status"];
      message = decodeURIComponent(String(headers["grpc-message"] ?? ""));
      if (grpc !== undefined) status = String(grpc);
      else if (!String(headers["content-type"] ?? "").startsWith("application/grpc"))
        status = String(Code.InvalidArgument);
    });
    stream.on("trailers", (trailers) => {
      if (trailers["grpc-status"] !== undefined) status = String(trailers["grpc-status"]);
      if (trailers["grpc-message"] !== undefined) message = decodeURIComponent(String(trailers["grpc-message"]));
    });
    stream.on("data", () => {});
    stream.on("error", () => {});
    stream.on("close", () => {
      clearTimeout(timer);
      resolve({ status: status ?? "reset", message });
    });
    stream.end(body);
  });
}

async function waitForConnectionsToDrain(test: TestServer): Promise<void> {
  const { waitFor } = await import("./support/processes.js");
  // Generous: on a loaded 2-core machine the server notices hundreds of closed sockets late.
  await waitFor(() => test.server.connections <= 1, { timeoutMs: 20_000, what: "garbage connections to be closed" });
}
