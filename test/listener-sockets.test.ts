import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createTestCertificates, type TestCertificates } from "./support/certificates.js";
import { waitFor } from "./support/processes.js";
import { serverSocketsNoDelay } from "./support/socket-options.js";
import { startTestServer, type TestServer } from "./support/server.js";

/** Sends an HTTP/1.1 request on `socket` and resolves at the first bytes of its answer; the socket stays open. */
function http1Request(socket: net.Socket): Promise<void> {
  return new Promise((resolve, reject) => {
    socket.once("error", reject);
    socket.once("data", () => resolve());
    socket.write("GET /sandbox.v1.SandboxService/ListProcesses HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  });
}

function http2Session(url: string, options: http2.SecureClientSessionOptions = {}): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url, options);
    session.once("error", reject);
    session.once("remoteSettings", () => resolve(session));
  });
}

describe("every accepted socket has TCP_NODELAY, so small frames are not held for the peer's delayed ACK", () => {
  let certificates: TestCertificates;
  let test: TestServer | undefined;
  const open: Array<{ destroy(): void }> = [];
  beforeAll(() => {
    certificates = createTestCertificates();
  });
  afterAll(() => certificates.remove());
  afterEach(async () => {
    for (const connection of open.splice(0)) connection.destroy();
    await test?.close();
    test = undefined;
  });

  it("cleartext: HTTP/2 and HTTP/1.1 connections", async () => {
    test = await startTestServer();
    const session = await http2Session(test.server.url);
    open.push(session);
    const socket = net.connect(test.server.port, "127.0.0.1");
    open.push(socket);
    await http1Request(socket);
    const port = test.server.port;
    const flags = await waitFor(
      () => {
        const found = serverSocketsNoDelay(process.pid, port);
        return found.length === 2 ? found : undefined;
      },
      { what: "both connections to be accepted" },
    );
    expect(flags).toEqual([true, true]);
  });

  it("TLS: HTTP/2 and HTTP/1.1 chosen by ALPN", async () => {
    test = await startTestServer({ tls: { cert: certificates.serverCert, key: certificates.serverKey } });
    const session = await http2Session(test.server.url, { ca: certificates.ca });
    open.push(session);
    const socket = tls.connect({
      port: test.server.port,
      host: "127.0.0.1",
      ca: certificates.ca,
      ALPNProtocols: ["http/1.1"],
    });
    open.push(socket);
    await new Promise((resolve) => socket.once("secureConnect", resolve));
    await http1Request(socket);
    const port = test.server.port;
    const flags = await waitFor(
      () => {
        const found = serverSocketsNoDelay(process.pid, port);
        return found.length === 2 ? found : undefined;
      },
      { what: "both connections to be accepted" },
    );
    expect(flags).toEqual([true, true]);
  });
});
