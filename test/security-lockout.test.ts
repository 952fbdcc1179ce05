import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { createTestCertificates, type TestCertificates } from "./support/certificates.js";
import { startDaemonProcess, type DaemonCommand, type DaemonProcess } from "./support/daemon-process.js";
import { openFileDescriptors, waitFor } from "./support/processes.js";
import { collectExec } from "./support/rpc.js";
import { bearer, createWorkspace, startTestServer, type TestServer } from "./support/server.js";
import { repositoryRoot } from "./support/tools.js";

const token = "lockout-token";
/** The daemon as a process of its own, with the listener's timeouts set by the test. */
const serverProcess: DaemonCommand = {
  file: process.execPath,
  args: ["--import", "tsx", "test/support/server-process.ts"],
  cwd: repositoryRoot,
};
/** The listener's preface, handshake and headers timeouts in the lock-out test, in milliseconds. */
const timeoutMs = 30_000;
/** More half-open sockets than the default connection budget (1024) holds. */
const attackSockets = 1100;

/** How one attacking socket misbehaves. */
type Misbehaviour =
  /** Connects and sends nothing: cleartext, the protocol is never told; TLS, the handshake never starts. */
  | "silent"
  /** TLS only: the first 5 bytes of a ClientHello record, then nothing: the handshake never completes. */
  | "partial-handshake"
  /** Sends a request line and one header, never the blank line; reads what comes back, never closes. */
  | "unfinished-headers"
  /** The same, but never reads a byte: a 408 is never read and the peer never closes. */
  | "unread-408";

/**
 * Opens one attacking socket to `port` from loopback address `from` and resolves once it is in place (or was
 * closed by the daemon, which the attack does not mind). The socket is never ended by this side.
 */
function attack(port: number, from: string, misbehaviour: Misbehaviour, ca: Buffer | undefined): Promise<net.Socket> {
  return new Promise((resolve) => {
    const request = "POST /sandbox.v1.SandboxService/Exec HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    const placed = (socket: net.Socket) => {
      if (misbehaviour === "unread-408") socket.pause();
      else socket.resume();
      resolve(socket);
    };
    let socket: net.Socket;
    if (ca === undefined || misbehaviour === "silent" || misbehaviour === "partial-handshake") {
      // allowHalfOpen: the daemon's FIN does not make this side close.
      socket = net.connect({ port, host: "127.0.0.1", localAddress: from, allowHalfOpen: true }, () => {
        if (misbehaviour === "partial-handshake") socket.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00]));
        else if (misbehaviour !== "silent") socket.write(request);
        placed(socket);
      });
    } else {
      socket = tls.connect(
        {
          port,
          host: "127.0.0.1",
          localAddress: from,
          ca,
          ALPNProtocols: ["http/1.1"],
          allowHalfOpen: true,
        } as tls.ConnectionOptions,
        () => {
          socket.write(request);
          placed(socket);
        },
      );
    }
    socket.on("error", () => {});
    socket.once("close", () => resolve(socket));
  });
}

/**
 * Where attacking socket `index` comes from: five loopback addresses, the client's own (127.0.0.1)
 * among them, each holding fewer than the per-peer cap, together more than the whole budget.
 */
function sourceOf(index: number): string {
  return `127.0.0.${1 + (index % 5)}`;
}

/** The misbehaviour of attacking socket `index`: an even mix of those that apply. */
function misbehaviourOf(index: number, withTls: boolean): Misbehaviour {
  const kinds: Misbehaviour[] = withTls
    ? ["silent", "partial-handshake", "unfinished-headers", "unread-408"]
    : ["silent", "unfinished-headers", "unread-408"];
  return kinds[index % kinds.length];
}

/** Runs `echo` through Exec with the token on a fresh connection; resolves with stdout and the time it took. */
async function honestExec(url: string, ca: Buffer | undefined, text: string): Promise<{ stdout: string; ms: number }> {
  const sessionManager = new Http2SessionManager(url, undefined, ca === undefined ? undefined : { ca });
  const client = createClient(
    SandboxService,
    createGrpcTransport({
      baseUrl: url,
      sessionManager,
      nodeOptions: ca === undefined ? undefined : { ca },
      interceptors: [bearer(token)],
    }),
  );
  const started = performance.now();
  try {
    const result = await collectExec(client, { command: `echo ${text}` }, { timeoutMs: 20_000 });
    return { stdout: result.stdout.toString(), ms: performance.now() - started };
  } finally {
    sessionManager.abort();
  }
}

describe("half-open sockets cannot lock clients out", () => {
  let certificates: TestCertificates;
  let workspace: string;
  beforeAll(() => {
    certificates = createTestCertificates();
    workspace = createWorkspace();
  });
  afterAll(() => certificates.remove());

  for (const withTls of [false, true]) {
    it(`${withTls ? "TLS" : "cleartext"}: ${attackSockets} held sockets from five addresses, the client's own among them; an honest Exec is answered at once, and they are destroyed on time`, async () => {
      // The listener's timeouts are 30 s here (10 s by default): opening the attack takes up to
      // 11 s on a loaded machine, and the budget must be full when the honest client comes.
      const options = {
        workspaceRoots: [workspace],
        token,
        listener: { prefaceTimeoutMs: timeoutMs, headersTimeoutMs: timeoutMs },
        tlsFiles: withTls ? { cert: certificates.files.serverCert, key: certificates.files.serverKey } : undefined,
      };
      const daemon: DaemonProcess = await startDaemonProcess([], {
        ...serverProcess,
        env: { ...process.env, SANDBOXD_TEST_SERVER_OPTIONS: JSON.stringify(options) },
      });
      const pid = daemon.child.pid!;
      const port = Number(new URL(daemon.url).port);
      const ca = withTls ? certificates.ca : undefined;
      const held: net.Socket[] = [];
      try {
        expect((await honestExec(daemon.url, ca, "warm")).stdout).toBe("warm\n");
        const idleFds: number = await waitFor(
          () => {
            const count = openFileDescriptors(pid);
            return count < 60 ? count : 0;
          },
          { what: "the warm-up connection to be closed" },
        );

        // Opened a few at a time, as fast as the daemon accepts them.
        for (let index = 0; index < attackSockets; index += 50) {
          held.push(
            ...(await Promise.all(
              Array.from({ length: Math.min(50, attackSockets - index) }, (_, offset) =>
                attack(port, sourceOf(index + offset), misbehaviourOf(Math.floor((index + offset) / 5), withTls), ca),
              ),
            )),
          );
        }
        // The daemon accepts from its backlog at its own pace: wait until its budget is full.
        const attackedFds: number = await waitFor(
          () => {
            const count = openFileDescriptors(pid);
            return count >= idleFds + 1000 ? count : 0;
          },
          { timeoutMs: timeoutMs - 5_000, what: "the daemon to hold the attacking sockets" },
        );
        // Before: the daemon held every slot of its budget and closed each new connection at once.
        const honest = await honestExec(daemon.url, ca, "served");
        expect(honest.stdout).toBe("served\n");
        // Within 1 s, far below the attacker's hold (the timeouts, and forever for an unread 408, before
        // the fix): 19-96 ms in runs with both cores busy, connection and TLS handshake included.
        expect(honest.ms).toBeLessThan(1_000);

        // The daemon lets go of every attacking socket by itself, while the attacker keeps them open:
        // headers time out, a 408 is given a short grace, handshakes and silence time out.
        const attacked = performance.now();
        await waitFor(() => openFileDescriptors(pid) <= idleFds + 5, {
          timeoutMs: timeoutMs + 40_000,
          intervalMs: 250,
          what: `the daemon to close the attacking sockets (it held ${attackedFds} fds)`,
        });
        console.log(
          `${withTls ? "TLS" : "cleartext"}: the daemon held ${attackedFds} fds (${idleFds} idle); honest Exec in ${honest.ms.toFixed(0)} ms; ` +
            `back to ${openFileDescriptors(pid)} fds ${((performance.now() - attacked) / 1000).toFixed(1)} s later, ${held.filter((socket) => !socket.destroyed).length} sockets still open on the attacker's side`,
        );
        expect(held.filter((socket) => !socket.destroyed).length, "the attacker never closed its side").toBeGreaterThan(
          0,
        );
        expect((await honestExec(daemon.url, ca, "still")).stdout).toBe("still\n");
      } finally {
        for (const socket of held) socket.destroy();
        daemon.child.kill("SIGTERM");
        await daemon.exited();
      }
    }, 180_000);
  }
});

/** A cleartext socket from `from` that sends nothing; resolves once connected. */
function silent(port: number, from: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: "127.0.0.1", localAddress: from }, () => resolve(socket));
    socket.once("error", reject);
  });
}

/** An HTTP/2 connection from `from` that made one authenticated call (ListProcesses), which the daemon served. */
async function provenSession(url: string, from: string): Promise<http2.ClientHttp2Session> {
  const session = await new Promise<http2.ClientHttp2Session>((resolve, reject) => {
    const made = http2.connect(url, { localAddress: from } as http2.SecureClientSessionOptions);
    made.once("error", reject);
    made.once("remoteSettings", () => resolve(made));
  });
  expect(await listProcesses(session)).toBe("0");
  return session;
}

/** Calls ListProcesses with the token on `session`; resolves with the grpc-status. */
function listProcesses(session: http2.ClientHttp2Session): Promise<string> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": "/sandbox.v1.SandboxService/ListProcesses",
      "content-type": "application/grpc",
      te: "trailers",
      authorization: `Bearer ${token}`,
    });
    stream.end(Buffer.from([0, 0, 0, 0, 0]));
    stream.once("trailers", (trailers) => resolve(String(trailers["grpc-status"])));
    stream.once("error", reject);
    stream.resume();
  });
}

/** GET /metrics with the token on `session`; resolves with the text. */
function metricsOn(session: http2.ClientHttp2Session): Promise<string> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":path": "/metrics", authorization: `Bearer ${token}` });
    let text = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => (text += chunk));
    stream.once("end", () => resolve(text));
    stream.once("error", reject);
  });
}

/** Resolves once the daemon closed `socket`. */
function closed(socket: net.Socket): Promise<void> {
  return new Promise((resolve) => {
    if (socket.destroyed) return resolve();
    socket.on("error", () => {});
    socket.resume();
    socket.once("close", () => resolve());
  });
}

describe("the connection budget: sockets that made no authenticated call make room, fairly", () => {
  let test: TestServer | undefined;
  const open: Array<{ destroy(): void }> = [];
  afterEach(async () => {
    for (const connection of open.splice(0)) connection.destroy();
    await test?.close();
    test = undefined;
  });

  it("a newcomer to a full budget displaces the oldest unproven connection of the peer holding the most; proven ones stay", async () => {
    test = await startTestServer({
      token,
      listener: { maxConnections: 4, maxConnectionsPerPeer: 0, prefaceTimeoutMs: 60_000 },
    });
    const port = test.server.port;
    const proven = await provenSession(test.server.url, "127.0.0.1");
    open.push(proven);
    const [first, second] = [await silent(port, "127.0.0.2"), await silent(port, "127.0.0.2")];
    const other = await silent(port, "127.0.0.3");
    open.push(first, second, other);
    const newcomer = await silent(port, "127.0.0.4");
    open.push(newcomer);
    await closed(first);
    expect([second, other, newcomer].map((socket) => socket.destroyed)).toEqual([false, false, false]);
    expect(await listProcesses(proven)).toBe("0");
    // Read on the proven connection: a new one would take another place of the full budget.
    expect(await metricsOn(proven)).toMatch(/^sandboxd_connections_turned_away_total\{how="displaced"\} 1$/m);
  });

  it("a peer holds at most its share of unproven connections: its own oldest makes room; other peers and its proven connections are untouched", async () => {
    test = await startTestServer({
      token,
      listener: { maxConnections: 100, maxConnectionsPerPeer: 2, prefaceTimeoutMs: 60_000 },
    });
    const port = test.server.port;
    const proven = await provenSession(test.server.url, "127.0.0.2");
    open.push(proven);
    const other = await silent(port, "127.0.0.3");
    const mine = [await silent(port, "127.0.0.2"), await silent(port, "127.0.0.2")];
    open.push(other, ...mine);
    const third = await silent(port, "127.0.0.2");
    open.push(third);
    await closed(mine[0]);
    expect([mine[1], third, other].map((socket) => socket.destroyed)).toEqual([false, false, false]);
    expect(await listProcesses(proven)).toBe("0");
  });
});
