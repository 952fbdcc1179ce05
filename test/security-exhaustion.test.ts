import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { connect as connectSandbox } from "../src/client/index.js";
import { createTestCertificates, type TestCertificates } from "./support/certificates.js";
import { holdsFor, waitFor } from "./support/processes.js";
import { Code } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

/** What came back on an HTTP/2 stream whose request body was never sent. */
interface Answer {
  status: number;
  grpcStatus?: string;
  grpcMessage?: string;
}

function connect(url: string, options: http2.SecureClientSessionOptions = {}): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url, options);
    session.once("error", reject);
    session.once("remoteSettings", () => resolve(session));
  });
}

/** Opens a gRPC stream with headers only (END_STREAM never sent, no body) and resolves with its answer. */
function headersOnly(
  session: http2.ClientHttp2Session,
  path: string,
  headers: http2.OutgoingHttpHeaders = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request(
      { ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers", ...headers },
      { endStream: false },
    );
    stream.once("response", (response) => {
      resolve({
        status: Number(response[":status"]),
        grpcStatus: response["grpc-status"] as string | undefined,
        grpcMessage: response["grpc-message"] as string | undefined,
      });
    });
    stream.once("error", reject);
    stream.once("close", () => reject(new Error(`stream closed without an answer (code ${stream.rstCode})`)));
    stream.resume();
  });
}

/** Makes a call with an empty request message and resolves with the response headers. */
function call(
  session: http2.ClientHttp2Session,
  path: string,
  headers: http2.OutgoingHttpHeaders = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    stream.end(Buffer.from([0, 0, 0, 0, 0]));
    stream.once("response", (response) => {
      resolve({
        status: Number(response[":status"]),
        grpcStatus: response["grpc-status"] as string | undefined,
        grpcMessage: response["grpc-message"] as string | undefined,
      });
    });
    stream.once("error", reject);
    stream.resume();
  });
}

/** Resolves when the server closes `socket`, with what it sent before. */
function closedByServer(socket: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    let received = "";
    socket.on("data", (data: Buffer) => (received += data.toString("latin1")));
    socket.on("error", () => {});
    socket.once("close", () => resolve(received));
  });
}

describe("nothing is held for a caller without the token", () => {
  let test: TestServer;
  beforeAll(async () => {
    test = await startTestServer({ token: "exhaustion-token" });
  });
  afterAll(() => test.close());

  it("a call is refused on its headers, before its body: of 300 streams that never send one, none is held", async () => {
    const session = await connect(test.server.url);
    const other = await connect(test.server.url);
    try {
      const outcomes = await Promise.allSettled(
        Array.from({ length: 300 }, (_, index) =>
          headersOnly(
            session,
            index % 2 === 0 ? "/sandbox.v1.SandboxService/Exec" : "/sandbox.v1.SandboxService/StartProcess",
          ),
        ),
      );
      // Answered UNAUTHENTICATED, or, past the few streams a refused connection keeps, reset by
      // HTTP/2 before they were read (REFUSED_STREAM): none waits for a body.
      const answers = outcomes.flatMap((outcome) => (outcome.status === "fulfilled" ? [outcome.value] : []));
      expect(answers.length).toBeGreaterThanOrEqual(16);
      for (const answer of answers)
        expect(answer).toEqual({
          status: 200,
          grpcStatus: String(Code.Unauthenticated),
          grpcMessage: "missing bearer token",
        });
      const wrong = await headersOnly(other, "/sandbox.v1.SandboxService/ListProcesses", {
        authorization: "Bearer nope",
      });
      expect(wrong.grpcMessage).toBe("invalid bearer token");
      expect(test.server.manager.list()).toHaveLength(0);
    } finally {
      session.destroy();
      other.destroy();
    }
  });
});

describe("calls answered without a token (health) are bounded", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("per connection, Watch streams in all, and the time to send a request", async () => {
    test = await startTestServer({
      token: "exhaustion-token",
      gate: { maxPublicCallsPerConnection: 3, maxWatchStreams: 2, publicRequestTimeoutMs: 300 },
    });
    const session = await connect(test.server.url);
    const other = await connect(test.server.url);
    try {
      // Three checks that never send their body fill the connection's allowance; the fourth is refused.
      const held = [0, 1, 2].map(() =>
        session.request(
          {
            ":method": "POST",
            ":path": "/grpc.health.v1.Health/Check",
            "content-type": "application/grpc",
            te: "trailers",
          },
          { endStream: false },
        ),
      );
      const closed = held.map(
        (stream) => new Promise<void>((resolve) => (stream.on("error", () => {}), stream.once("close", resolve))),
      );
      for (const stream of held) stream.resume();
      // The daemon counts a call as its headers are read, and one connection's streams are read in order:
      // the fourth comes after the three on the same connection.
      const fourth = await headersOnly(session, "/grpc.health.v1.Health/Check");
      expect(fourth.grpcStatus).toBe(String(Code.ResourceExhausted));
      expect(fourth.grpcMessage).toBe("too many health calls on this connection: the limit of 3 is reached");
      // They are reset once their time to send a request is up, and the connection is served again.
      await Promise.all(closed);
      const watches = [0, 1].map(() => {
        const stream = other.request({
          ":method": "POST",
          ":path": "/grpc.health.v1.Health/Watch",
          "content-type": "application/grpc",
          te: "trailers",
        });
        stream.end(Buffer.from([0, 0, 0, 0, 0]));
        stream.on("error", () => {});
        stream.resume();
        return stream;
      });
      // Answered, so counted: the daemon sends a watch's headers once it has taken it in.
      await Promise.all(watches.map((stream) => new Promise((resolve) => stream.once("response", resolve))));
      const third = await headersOnly(session, "/grpc.health.v1.Health/Watch");
      expect(third.grpcStatus).toBe(String(Code.ResourceExhausted));
      expect(third.grpcMessage).toBe("too many health watches: the limit of 2 is reached");
      for (const watch of watches) watch.close();
    } finally {
      session.destroy();
      other.destroy();
    }
  });

  it("caps connections in all: when every one made a call, one more is closed at once", async () => {
    test = await startTestServer({
      listener: { maxConnections: 3, maxConnectionsPerPeer: 0, prefaceTimeoutMs: 60_000 },
    });
    const sessions = await Promise.all([0, 1, 2].map(() => connect(test!.server.url)));
    try {
      // A call the daemon lets through proves a connection: it is never closed to make room.
      for (const session of sessions)
        expect((await call(session, "/sandbox.v1.SandboxService/ListProcesses")).status).toBe(200);
      const refused = net.connect(test.server.port, "127.0.0.1");
      expect(await closedByServer(refused)).toBe("");
      expect(sessions.map((session) => session.closed)).toEqual([false, false, false]);
    } finally {
      for (const session of sessions) session.destroy();
    }
    await waitFor(() => test!.server.connections === 0, { what: "the connections to be gone" });
    (await connect(test.server.url)).destroy();
  });

  it("an HTTP/2 connection that makes no call is closed after the admission time", async () => {
    test = await startTestServer({ listener: { prefaceTimeoutMs: 300 } });
    const idle = await connect(test.server.url);
    await new Promise((resolve) => idle.once("close", resolve));
    const used = await connect(test.server.url);
    const answer = await call(used, "/grpc.health.v1.Health/Check");
    expect(answer.status).toBe(200);
    await holdsFor(() => !used.closed, { forMs: 600, what: "the used connection staying open" });
    used.destroy();
  });
});

describe("HTTP/1.1 connections are timed out, cleartext and TLS", () => {
  let certificates: TestCertificates;
  let test: TestServer | undefined;
  beforeAll(() => {
    certificates = createTestCertificates();
  });
  afterAll(() => certificates.remove());
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  const variants = [
    { name: "cleartext", tls: false },
    { name: "TLS", tls: true },
  ];
  for (const variant of variants) {
    const open = (server: TestServer): Promise<net.Socket> =>
      new Promise((resolve) => {
        if (!variant.tls) {
          const socket = net.connect(server.server.port, "127.0.0.1", () => resolve(socket));
          return;
        }
        const socket = tls.connect(
          { port: server.server.port, host: "127.0.0.1", ca: certificates.ca, ALPNProtocols: ["http/1.1"] },
          () => resolve(socket),
        );
      });
    const start = () =>
      startTestServer({
        ...(variant.tls ? { tls: { cert: certificates.serverCert, key: certificates.serverKey } } : {}),
        listener: { headersTimeoutMs: 400, requestTimeoutMs: 400 },
      });

    it(`${variant.name}: slowloris headers get 408 and a close; a stalled body is closed; an idle kept-alive connection is closed`, async () => {
      test = await start();
      const slow = await open(test);
      const slowClosed = closedByServer(slow);
      slow.write("POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: 127.0.0.1\r\n");
      const trickle = setInterval(() => slow.writable && slow.write("X-A: b\r\n"), 100);
      expect(await slowClosed).toMatch(/^HTTP\/1\.1 408 /);
      clearInterval(trickle);

      const stalled = await open(test);
      const stalledClosed = closedByServer(stalled);
      stalled.write(
        "POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/proto\r\nContent-Length: 100\r\n\r\n0123456789",
      );
      expect(await stalledClosed).toBe("");

      const idle = await open(test);
      const idleClosed = closedByServer(idle);
      idle.write(
        "POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/proto\r\nContent-Length: 0\r\n\r\n",
      );
      const idleAnswer = await idleClosed;
      expect(idleAnswer).toMatch(/^HTTP\/1\.1 200 /);
      // Closed silently: a 408 after an answer could be read as the answer to a pooled client's next request.
      expect(idleAnswer).not.toContain("408");
      await waitFor(() => test!.server.connections === 0, { what: "the connections to be gone" });
    });
  }
});

describe("a daemon without a token answers loopback host names only (DNS rebinding)", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("refuses Host: attacker.example with PERMISSION_DENIED and starts nothing; loopback names work", async () => {
    test = await startTestServer();
    const session = await connect(test.server.url);
    try {
      const forged = await headersOnly(session, "/sandbox.v1.SandboxService/StartProcess", {
        ":authority": "attacker.example:7007",
      });
      expect(forged.grpcStatus).toBe(String(Code.PermissionDenied));
      expect(forged.grpcMessage).toContain('host not allowed: "attacker.example"');
      expect(test.server.manager.list()).toHaveLength(0);
      for (const host of ["localhost:1", "127.0.0.1", "[::1]:7007", "127.1.2.3:9"]) {
        const answer = await call(session, "/sandbox.v1.SandboxService/ListProcesses", { ":authority": host });
        // Served: a trailers-only answer would carry the refusal in the headers.
        expect(answer, host).toEqual({ status: 200, grpcStatus: undefined, grpcMessage: undefined });
      }
    } finally {
      session.destroy();
    }
  });

  it("a daemon with a token serves any host name", async () => {
    test = await startTestServer({ token: "rebinding-token" });
    const session = await connect(test.server.url);
    try {
      const answer = await call(session, "/sandbox.v1.SandboxService/ListProcesses", {
        ":authority": "sandbox.example:7007",
        authorization: "Bearer rebinding-token",
      });
      expect(answer).toEqual({ status: 200, grpcStatus: undefined, grpcMessage: undefined });
    } finally {
      session.destroy();
    }
  });
});

describe("a request message over the size limit is refused with RESOURCE_EXHAUSTED naming the limit", () => {
  let test: TestServer;
  beforeAll(async () => {
    test = await startTestServer();
  });
  afterAll(() => test.close());

  it("the daemon answers a 33 MB message with the status at once, without reading it", async () => {
    const session = await connect(test.server.url);
    try {
      const stream = session.request({
        ":method": "POST",
        ":path": "/sandbox.v1.SandboxService/StartProcess",
        "content-type": "application/grpc",
        te: "trailers",
      });
      stream.on("error", () => {});
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(33 * 1024 * 1024, 1);
      stream.write(prefix);
      stream.write(Buffer.alloc(1024 * 1024));
      const trailers = await new Promise<http2.IncomingHttpHeaders>((resolve) => stream.once("trailers", resolve));
      expect(trailers["grpc-status"]).toBe(String(Code.ResourceExhausted));
      expect(decodeURIComponent(String(trailers["grpc-message"]))).toBe(
        `message size ${33 * 1024 * 1024} is larger than configured readMaxBytes ${4 * 1024 * 1024}`,
      );
      stream.close();
    } finally {
      session.destroy();
    }
  });

  it("the SDK refuses to send 33 MB and 100 MB messages with RESOURCE_EXHAUSTED naming its limit, not a stream reset", async () => {
    const sandbox = await connectSandbox({ baseUrl: test.server.url });
    try {
      const cat = await sandbox.startProcess("cat", { stdin: true });
      for (const megabytes of [33, 100]) {
        const error = await cat.sendInput(new Uint8Array(megabytes * 1024 * 1024)).catch((failure: unknown) => failure);
        expect(error).toMatchObject({ code: "RESOURCE_EXHAUSTED" });
        expect((error as Error).message).toContain(`is larger than configured writeMaxBytes ${4 * 1024 * 1024}`);
        // Input that large at start breaks the daemon's own bound on pending stdin: refused before any call.
        const refused = await sandbox
          .exec("cat", { input: new Uint8Array(megabytes * 1024 * 1024) })
          .catch((failure: unknown) => failure);
        expect(refused).toMatchObject({ code: "INVALID_ARGUMENT" });
      }
      expect((await cat.sendInput("still open\n")).bytesWritten).toBe(11);
      await cat.closeInput();
      expect((await cat.wait()).stdout()).toBe("still open\n");
      expect((await sandbox.exec("echo still serving")).stdout).toBe("still serving\n");
    } finally {
      await sandbox.close();
    }
  });
});
