import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { startServer, type SandboxServer } from "../src/server/index.js";
import { startBlackholeProxy, type BlackholeProxy } from "./support/blackhole-proxy.js";
import { waitFor } from "./support/processes.js";
import { Code, ProcessStatus, sleepMarker, sleepers, streamError, type SandboxClient } from "./support/rpc.js";

const root = path.resolve(import.meta.dirname, "..");

describe("chaos: connections cut during streams", () => {
  let server: SandboxServer | undefined;
  let proxy: BlackholeProxy | undefined;
  const sessions: Http2SessionManager[] = [];
  const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-chaos-")));
  const viaProxy = (): SandboxClient => {
    const sessionManager = new Http2SessionManager(proxy!.url);
    sessions.push(sessionManager);
    return createClient(SandboxService, createGrpcTransport({ baseUrl: proxy!.url, sessionManager }));
  };
  afterEach(async () => {
    for (const session of sessions.splice(0)) session.abort();
    await proxy?.close();
    await server?.close();
  });
  afterAll(() => rmSync(workspace, { recursive: true, force: true }));

  it("a StreamLogs reader cut mid-stream resumes from its offset on a new connection and loses no byte", async () => {
    server = await startServer({ port: 0, workspaceRoots: [workspace] });
    proxy = await startBlackholeProxy({ host: "127.0.0.1", port: server.port });
    const expected = Buffer.from(Array.from({ length: 300_000 }, (_, i) => `${i + 1}\n`).join(""));
    const client = viaProxy();
    const { process } = await client.startProcess({ spec: { command: "seq 1 300000; sleep 0.5" } });
    const processId = process!.processId;
    const received: Buffer[] = [];
    let offset = 0n;
    let cuts = 0;
    let exited = false;
    while (!exited) {
      const reader = viaProxy();
      try {
        for await (const response of reader.streamLogs({ processId, stdoutOffset: offset, follow: true })) {
          const event = response.event;
          if (event.case === "output") {
            expect(event.value.offset).toBe(offset);
            received.push(Buffer.from(event.value.data));
            offset += BigInt(event.value.data.length);
            // Cut twice, in the middle of the stream.
            if ((cuts === 0 && offset > 200_000n) || (cuts === 1 && offset > 1_000_000n)) {
              cuts++;
              proxy.cutAll();
            }
          }
          if (event.case === "exited") exited = true;
        }
      } catch (error) {
        // The cut surfaces on the client as some transport error (UNAVAILABLE, ABORTED, CANCELED,
        // INTERNAL, depending on where the reset lands); whatever it is, resume from the offset.
        expect((error as { code: Code }).code).not.toBe(Code.OutOfRange);
      }
    }
    expect(cuts).toBe(2);
    expect(Buffer.concat(received).equals(expected)).toBe(true);
    console.log(`chaos: ${expected.length} bytes streamed through 2 cuts, 0 lost, 0 duplicated`);
  });

  it("the server frees what a cut connection held: its Exec is killed, a background process it followed runs on", async () => {
    server = await startServer({ port: 0, workspaceRoots: [workspace] });
    proxy = await startBlackholeProxy({ host: "127.0.0.1", port: server.port });
    const client = viaProxy();
    const execMarker = sleepMarker();
    const exec = client.exec({ spec: { command: "sleep", args: [execMarker] } })[Symbol.asyncIterator]();
    await exec.next();
    const backgroundMarker = sleepMarker();
    const { process } = await client.startProcess({ spec: { command: "sleep", args: [backgroundMarker] } });
    const logs = client.streamLogs({ processId: process!.processId, follow: true })[Symbol.asyncIterator]();
    await logs.next();
    await waitFor(() => sleepers(execMarker).length === 1 && server!.activeCalls === 2, { what: "both calls" });
    proxy.cutAll();
    await waitFor(() => sleepers(execMarker).length === 0, { what: "the cut Exec to be killed" });
    await waitFor(() => server!.activeCalls === 0, { what: "the cut calls to be released" });
    expect(sleepers(backgroundMarker)).toHaveLength(1);
    expect(server.manager.get(process!.processId).status).toBe("running");
    server.manager.get(process!.processId).kill("SIGKILL");
  });
});

describe("chaos: the server restarted during a stream", () => {
  const cleanups: Array<() => unknown> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it("a graceful restart ends open streams with UNAVAILABLE at once; the same client works after it", async () => {
    const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-restart-")));
    cleanups.push(() => rmSync(workspace, { recursive: true, force: true }));
    let server = await startServer({ port: 0, workspaceRoots: [workspace] });
    const port = server.port;
    const sessionManager = new Http2SessionManager(server.url);
    cleanups.push(() => sessionManager.abort());
    const client = createClient(SandboxService, createGrpcTransport({ baseUrl: server.url, sessionManager }));
    const marker = sleepMarker();
    const exec = client.exec({ spec: { command: "sleep", args: [marker] } });
    const { process } = await client.startProcess({ spec: { command: "sleep", args: [sleepMarker()] } });
    const logs = client.streamLogs({ processId: process!.processId, follow: true });
    const execError = streamError(exec);
    const logsError = streamError(logs);
    await waitFor(() => sleepers(marker).length === 1, { what: "the Exec to run" });

    const closing = Date.now();
    await server.close(500);
    const [execFailure, logsFailure] = await Promise.all([execError, logsError]);
    expect(Date.now() - closing).toBeLessThan(10_000);
    expect(execFailure.code).toBe(Code.Unavailable);
    expect(logsFailure.code).toBe(Code.Unavailable);
    expect(sleepers(marker)).toHaveLength(0);

    server = await startServer({ port, workspaceRoots: [workspace] });
    cleanups.push(() => server.close());
    const answer = await waitFor(() => client.listProcesses({}).catch(() => undefined), {
      what: "the restarted server to answer",
    });
    expect(answer!.processes).toEqual([]);
  });

  it("a daemon killed with SIGKILL mid-stream: the client gets a transport error promptly, nothing hangs, the restarted daemon serves it", async () => {
    const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-restart-")));
    cleanups.push(() => rmSync(workspace, { recursive: true, force: true }));
    const first = await startDaemon(["--workspace", workspace]);
    cleanups.push(() => first.child.kill("SIGKILL"));
    const sessionManager = new Http2SessionManager(first.url);
    cleanups.push(() => sessionManager.abort());
    const client = createClient(SandboxService, createGrpcTransport({ baseUrl: first.url, sessionManager }));
    const marker = sleepMarker();
    const stream = client.exec({ spec: { command: "sleep", args: [marker] } })[Symbol.asyncIterator]();
    expect((await stream.next()).value?.event.case).toBe("started");
    const failure = (async () => {
      try {
        while (!(await stream.next()).done);
        return undefined;
      } catch (error) {
        return error as { code: Code };
      }
    })();
    const killedAt = Date.now();
    first.child.kill("SIGKILL");
    const error = await failure;
    expect(Date.now() - killedAt).toBeLessThan(10_000);
    console.log(
      `chaos: SIGKILL of the daemon reached the client as ${Code[error!.code]} "${(error as unknown as Error).message}" after ${Date.now() - killedAt} ms`,
    );
    // connect-node reports a torn-down HTTP/2 stream as UNAVAILABLE or CANCELED, and a socket reset
    // mid-read (ECONNRESET) as ABORTED: all three are transport errors a client retries.
    expect([Code.Unavailable, Code.Canceled, Code.Aborted]).toContain(error?.code);
    // Its orphan is reaped by the next start only with --state-dir (see reliability-daemon-death).
    for (const pid of sleepers(marker)) process.kill(pid, "SIGKILL");

    const port = new URL(first.url).port;
    const second = await startDaemon(["--workspace", workspace, "--port", port]);
    cleanups.push(() => second.child.kill("SIGKILL"));
    const result = await waitFor(() => client.listProcesses({}).catch(() => undefined), {
      what: "the restarted daemon to answer",
    });
    expect(result!.processes.map((info) => info.status)).not.toContain(ProcessStatus.RUNNING);
  }, 60_000);
});

async function startDaemon(args: string[]): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", ...args], {
    cwd: root,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (data: Buffer) => (stderr += data.toString()));
  const url = (await waitFor(() => /listening on (\S+)/.exec(stderr)?.[1], {
    timeoutMs: 30_000,
    what: "the daemon to listen",
  })) as string;
  return { child, url };
}
