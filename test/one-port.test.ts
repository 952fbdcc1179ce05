import http from "node:http";
import net from "node:net";
import tls from "node:tls";
import { createClient, type Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../gen/grpc/health/v1/health_pb.js";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { parseCommandLine } from "../src/cli/sandboxd/options.js";
import { createListener } from "../src/server/index.js";
import { createTestCertificates, type TestCertificates } from "./support/certificates.js";
import { waitFor } from "./support/processes.js";
import { Code, collectExec, rpcError } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { parseJsonStream, runCommand, tool } from "./support/tools.js";

/** An empty HTTP/2 SETTINGS frame: length 0, type 4, flags 0, stream 0. */
const emptySettingsFrame = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);
const http2Preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/**
 * Writes `bytes` to the port one byte at a time (each its own TCP segment, as far as Nagle allows)
 * and resolves with the first bytes the server answers (none if it closes the connection first).
 */
function dribble(port: number, bytes: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.setNoDelay(true);
    socket.once("data", (data) => {
      socket.destroy();
      resolve(data);
    });
    socket.once("error", reject);
    socket.once("close", () => resolve(Buffer.alloc(0)));
    socket.once("connect", async () => {
      for (const byte of bytes) {
        socket.write(Buffer.from([byte]));
        await new Promise((next) => setTimeout(next, 2));
      }
    });
  });
}

describe("one cleartext port for every protocol", () => {
  let test: TestServer;
  const managers: Http2SessionManager[] = [];
  const session = () => {
    const manager = new Http2SessionManager(test.server.url);
    managers.push(manager);
    return manager;
  };

  beforeAll(async () => {
    test = await startTestServer();
  });
  afterAll(async () => {
    for (const manager of managers) manager.abort();
    await test.close();
  });

  const transports: [string, () => Transport][] = [
    ["gRPC over HTTP/2", () => createGrpcTransport({ baseUrl: test.server.url, sessionManager: session() })],
    [
      "Connect over HTTP/2",
      () => createConnectTransport({ baseUrl: test.server.url, httpVersion: "2", sessionManager: session() }),
    ],
    [
      "gRPC-Web over HTTP/2",
      () => createGrpcWebTransport({ baseUrl: test.server.url, httpVersion: "2", sessionManager: session() }),
    ],
    ["Connect over HTTP/1.1", () => createConnectTransport({ baseUrl: test.server.url, httpVersion: "1.1" })],
    ["gRPC-Web over HTTP/1.1", () => createGrpcWebTransport({ baseUrl: test.server.url, httpVersion: "1.1" })],
  ];
  for (const [name, transport] of transports) {
    it(`serves ${name}: unary, server streaming and health`, async () => {
      const client = createClient(SandboxService, transport());
      const result = await collectExec(client, { command: `printf '${name}'; exit 4` });
      expect(result.stdout.toString()).toBe(name);
      expect(result.exited.exitCode).toBe(4);
      expect((await rpcError(client.getProcess({ processId: "no-such-process" }))).code).toBe(Code.NotFound);
      expect((await createClient(Health, transport()).check({})).status).toBe(ServingStatus.SERVING);
    });
  }

  it("counts HTTP/1.1 connections with HTTP/2 sessions", async () => {
    const agent = new http.Agent({ keepAlive: true });
    const before = test.server.connections;
    try {
      const client = createClient(
        SandboxService,
        createConnectTransport({ baseUrl: test.server.url, httpVersion: "1.1", nodeOptions: { agent } }),
      );
      await client.listProcesses({});
      expect(test.server.connections).toBe(before + 1);
    } finally {
      agent.destroy();
    }
    await waitFor(() => test.server.connections === before, { what: "the HTTP/1.1 connection to close" });
  });

  it("tells the protocols apart when the first bytes arrive one by one", async () => {
    const settings = await dribble(test.server.port, Buffer.concat([http2Preface, emptySettingsFrame]));
    // The server's first frame is its SETTINGS: type 4 in the fourth byte.
    expect(settings[3]).toBe(4);
    const http1 = await dribble(
      test.server.port,
      Buffer.from("GET /sandbox.v1.SandboxService/ListProcesses HTTP/1.1\r\nHost: x\r\n\r\n"),
    );
    expect(http1.toString("latin1")).toMatch(/^HTTP\/1\.1 \d{3} /);
    // Starts like the HTTP/2 preface, then is not: HTTP/1.1's parser gets it, and rejects it.
    const almost = await dribble(test.server.port, Buffer.from("PRX * HTTP/1.1\r\n\r\n"));
    expect(almost.toString("latin1")).toMatch(/^HTTP\/1\.1 400 /);
  });
});

describe("the listener on its own", () => {
  it("closes a connection that sends nothing within the preface timeout", async () => {
    const listener = createListener((_request, response) => response.end(), { prefaceTimeoutMs: 200 });
    const port = await listener.listen(0, "127.0.0.1");
    try {
      const started = Date.now();
      const socket = net.connect(port, "127.0.0.1");
      await new Promise((resolve) => socket.once("close", resolve));
      expect(Date.now() - started).toBeGreaterThanOrEqual(150);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      listener.destroyConnections();
      await listener.close();
    }
  });

  it("closes idle HTTP/1.1 keep-alive connections on shutdown and lets a busy one finish its response", async () => {
    let release = () => {};
    const listener = createListener((request, response) => {
      if (request.url === "/slow") release = () => response.end("slow done");
      else response.end("fast");
    });
    const port = await listener.listen(0, "127.0.0.1");
    const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });
    const get = (url: string) =>
      new Promise<string>((resolve, reject) => {
        http
          .get({ port, host: "127.0.0.1", path: url, agent }, (response) => {
            let body = "";
            response.on("data", (chunk) => (body += chunk));
            response.on("end", () => resolve(body));
          })
          .on("error", reject);
      });
    try {
      // The slow request holds its connection, so the fast one opens a second, idle afterwards.
      const slow = get("/slow");
      slow.catch(() => {});
      expect(await get("/fast")).toBe("fast");
      await waitFor(() => listener.connections === 2, { what: "two HTTP/1.1 connections" });
      const closed = listener.close();
      listener.endConnections();
      await waitFor(() => listener.connections === 1, { what: "the idle connection to close" });
      release();
      expect(await slow).toBe("slow done");
      await closed;
      await waitFor(() => listener.connections === 0, { what: "no connection left" });
    } finally {
      agent.destroy();
      listener.destroyConnections();
    }
  });
});

describe("TLS on one port: ALPN picks HTTP/2 or HTTP/1.1", () => {
  let certificates: TestCertificates;
  let test: TestServer;
  let address: string;
  const managers: Http2SessionManager[] = [];

  beforeAll(async () => {
    certificates = createTestCertificates();
    test = await startTestServer({ tls: { cert: certificates.serverCert, key: certificates.serverKey } });
    address = `127.0.0.1:${test.server.port}`;
  });
  afterAll(async () => {
    for (const manager of managers) manager.abort();
    await test.close();
    certificates.remove();
  });

  it("has an https URL and offers h2 and http/1.1", async () => {
    expect(test.server.url).toBe(`https://${address}`);
    for (const protocol of ["h2", "http/1.1"]) {
      const socket = tls.connect({
        port: test.server.port,
        host: "127.0.0.1",
        ca: certificates.ca,
        ALPNProtocols: [protocol],
      });
      await new Promise((resolve, reject) => socket.once("secureConnect", resolve).once("error", reject));
      expect(socket.alpnProtocol).toBe(protocol);
      socket.destroy();
    }
  });

  it("serves gRPC over HTTP/2 and Connect and gRPC-Web over HTTP/1.1", async () => {
    const manager = new Http2SessionManager(test.server.url, undefined, { ca: certificates.ca });
    managers.push(manager);
    for (const transport of [
      createGrpcTransport({ baseUrl: test.server.url, sessionManager: manager }),
      createConnectTransport({ baseUrl: test.server.url, httpVersion: "1.1", nodeOptions: { ca: certificates.ca } }),
      createGrpcWebTransport({ baseUrl: test.server.url, httpVersion: "1.1", nodeOptions: { ca: certificates.ca } }),
    ]) {
      const result = await collectExec(createClient(SandboxService, transport), { command: "echo over tls" });
      expect(result.stdout.toString()).toBe("over tls\n");
    }
  });

  it("answers curl over HTTP/1.1 and HTTP/2, and grpcurl through reflection", async () => {
    for (const version of ["--http1.1", "--http2"]) {
      const result = await runCommand("curl", [
        "-sS",
        version,
        "--cacert",
        certificates.files.ca,
        "-w",
        "\n%{http_version}",
        "-H",
        "Content-Type: application/json",
        "-d",
        "{}",
        `${test.server.url}/grpc.health.v1.Health/Check`,
      ]);
      expect(result.stderr).toBe("");
      expect(result.stdout).toBe(`{"status":"SERVING"}\n${version === "--http2" ? "2" : "1.1"}`);
    }
    const listed = await runCommand(tool("grpcurl"), [
      "-cacert",
      certificates.files.ca,
      address,
      "list",
      "sandbox.v1.SandboxService",
    ]);
    expect(listed.stderr).toBe("");
    expect(listed.stdout).toContain("sandbox.v1.SandboxService.Exec\n");
  });
});

describe("mutual TLS", () => {
  let certificates: TestCertificates;
  let test: TestServer;
  const managers: Http2SessionManager[] = [];

  beforeAll(async () => {
    certificates = createTestCertificates();
    test = await startTestServer({
      tls: { cert: certificates.serverCert, key: certificates.serverKey, clientCa: certificates.ca },
    });
  });
  afterAll(async () => {
    for (const manager of managers) manager.abort();
    await test.close();
    certificates.remove();
  });

  it("refuses a client without a certificate and serves one with a certificate from the CA", async () => {
    const anonymous = new Http2SessionManager(test.server.url, undefined, { ca: certificates.ca });
    const known = new Http2SessionManager(test.server.url, undefined, {
      ca: certificates.ca,
      cert: certificates.clientCert,
      key: certificates.clientKey,
    });
    managers.push(anonymous, known);
    const refused = await rpcError(
      createClient(
        SandboxService,
        createGrpcTransport({ baseUrl: test.server.url, sessionManager: anonymous }),
      ).listProcesses({}),
    );
    // The TLS 1.3 handshake ends with the server's "certificate required" alert, which connect-node
    // reports as an internal error of the client, with the alert as its cause.
    expect(refused.code).toBe(Code.Internal);
    expect((refused.cause as { code?: string }).code).toBe("ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED");
    await expect(
      createClient(
        SandboxService,
        createGrpcTransport({ baseUrl: test.server.url, sessionManager: known }),
      ).listProcesses({}),
    ).resolves.toBeDefined();

    const url = `${test.server.url}/sandbox.v1.SandboxService/ListProcesses`;
    const curl = (extra: string[]) =>
      runCommand("curl", [
        "-sS",
        "--cacert",
        certificates.files.ca,
        ...extra,
        "-H",
        "Content-Type: application/json",
        "-d",
        "{}",
        url,
      ]);
    const withoutCertificate = await curl([]);
    expect(withoutCertificate.code).not.toBe(0);
    const withCertificate = await curl([
      "--cert",
      certificates.files.clientCert,
      "--key",
      certificates.files.clientKey,
    ]);
    expect(withCertificate.stderr).toBe("");
    expect(parseJsonStream(withCertificate.stdout)).toHaveLength(1);
  });

  it("reads the certificate, key and client CA files named by the flags", () => {
    const command = parseCommandLine(
      [
        "--tls-cert",
        certificates.files.serverCert,
        "--tls-key",
        certificates.files.serverKey,
        "--tls-client-ca",
        certificates.files.ca,
      ],
      {},
    );
    expect(command.kind).toBe("serve");
    const tlsOptions = command.kind === "serve" ? command.options.tls : undefined;
    expect(tlsOptions?.cert).toEqual(certificates.serverCert);
    expect(tlsOptions?.key).toEqual(certificates.serverKey);
    expect(tlsOptions?.clientCa).toEqual(certificates.ca);
    expect(() => parseCommandLine(["--tls-cert", certificates.files.serverCert], {})).toThrow(
      "--tls-cert and --tls-key go together",
    );
    const plain = parseCommandLine([], {});
    expect(plain.kind === "serve" && plain.options.tls).toBeUndefined();
  });
});
