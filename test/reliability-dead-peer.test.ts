import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterEach, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { startBlackholeProxy, type BlackholeProxy } from "./support/blackhole-proxy.js";
import { waitFor } from "./support/processes.js";
import { ProcessStatus, sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const keepalive = { intervalMs: 300, timeoutMs: 700 };

describe("a client that vanishes without closing", () => {
  let test: TestServer | undefined;
  let proxy: BlackholeProxy | undefined;
  let sessionManager: Http2SessionManager | undefined;
  afterEach(async () => {
    sessionManager?.abort();
    await proxy?.close();
    await test?.close();
  });

  it("is noticed by keepalive pings: its Exec is killed, a background process it followed keeps running", async () => {
    test = await startTestServer({ keepalive });
    proxy = await startBlackholeProxy({ host: "127.0.0.1", port: test.server.port });
    sessionManager = new Http2SessionManager(proxy.url);
    const vanishing = createClient(SandboxService, createGrpcTransport({ baseUrl: proxy.url, sessionManager }));

    const execMarker = sleepMarker();
    const execStream = vanishing.exec({ spec: { command: "sleep", args: [execMarker] } })[Symbol.asyncIterator]();
    expect((await execStream.next()).value?.event.case).toBe("started");

    const backgroundMarker = sleepMarker();
    const { process: background } = await test.client.startProcess({
      spec: { command: "sleep", args: [backgroundMarker] },
    });
    const logs = vanishing.streamLogs({ processId: background!.processId, follow: true })[Symbol.asyncIterator]();
    expect((await logs.next()).value?.event.case).toBe("process");
    await waitFor(() => sleepers(execMarker).length === 1 && sleepers(backgroundMarker).length === 1, {
      what: "both sleepers",
    });
    expect(test.server.activeCalls).toBe(2);

    proxy.blackhole();
    const cutAt = Date.now();
    await waitFor(() => sleepers(execMarker).length === 0, {
      timeoutMs: 15_000,
      what: "the vanished client's Exec to be killed",
    });
    const noticedMs = Date.now() - cutAt;
    // Noticed within one interval plus the ping timeout, with slack for a loaded machine.
    expect(noticedMs).toBeLessThan(keepalive.intervalMs + keepalive.timeoutMs + 8000);
    console.log(
      `dead peer noticed and its Exec killed ${noticedMs} ms after the cut (interval ${keepalive.intervalMs} ms, timeout ${keepalive.timeoutMs} ms)`,
    );

    await waitFor(() => test!.server.activeCalls === 0, { what: "the dead client's calls to be released" });
    await waitFor(() => test!.server.connections === 1, { what: "only the healthy client's connection to remain" });
    expect(sleepers(backgroundMarker)).toHaveLength(1);
    const { process: after } = await test.client.getProcess({ processId: background!.processId });
    expect(after?.status).toBe(ProcessStatus.RUNNING);
    await test.client.killProcess({ processId: background!.processId, signal: "SIGKILL" });
  });

  it("keeps a healthy idle connection open across many pings", async () => {
    test = await startTestServer({ keepalive: { intervalMs: 100, timeoutMs: 2000 } });
    const marker = sleepMarker(2);
    // A quiet Exec of 2 s spans many ping intervals and must not be cut.
    const stream = test.client.exec({ spec: { command: "sleep", args: [marker] } });
    const cases: string[] = [];
    for await (const response of stream) cases.push(response.event.case ?? "none");
    expect(cases).toEqual(["started", "exited"]);
  });
});
