import http2 from "node:http2";
import { afterEach, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { streamsAfterRefusal } from "../src/server/server.js";
import { waitFor } from "./support/processes.js";
import { collectExec, Code } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const token = "flood-token";

function connect(url: string): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url);
    session.once("error", reject);
    session.once("remoteSettings", () => resolve(session));
  });
}

/**
 * Keeps `streams` calls in flight on `session` until `stop` is called, a new one sent as each is
 * answered: unauthenticated Execs (headers only) or Health/Watch with an empty request. Counts the
 * answers by grpc-status.
 */
function flood(session: http2.ClientHttp2Session, kind: "unauthenticated" | "watch", streams: number) {
  const answers = new Map<string, number>();
  let stopped = false;
  const path = kind === "unauthenticated" ? "/sandbox.v1.SandboxService/Exec" : "/grpc.health.v1.Health/Watch";
  const send = () => {
    if (stopped || session.closed || session.destroyed) return;
    const stream = session.request(
      { ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" },
      { endStream: false },
    );
    let status: string | undefined;
    stream.on("response", (headers) => (status = headers["grpc-status"] as string | undefined));
    stream.on("trailers", (trailers) => (status ??= trailers["grpc-status"] as string | undefined));
    stream.on("error", () => {});
    stream.on("close", () => {
      answers.set(status ?? "reset", (answers.get(status ?? "reset") ?? 0) + 1);
      send();
    });
    if (kind === "watch") stream.end(Buffer.alloc(5));
    stream.resume();
  };
  for (let index = 0; index < streams; index++) send();
  return {
    answers,
    stop() {
      stopped = true;
    },
  };
}

describe("floods without the token: honest calls are served, the flood is bounded and refused", () => {
  let test: TestServer | undefined;
  const sessions: http2.ClientHttp2Session[] = [];
  afterEach(async () => {
    for (const session of sessions.splice(0)) session.destroy();
    await test?.close();
    test = undefined;
  });

  for (const kind of ["unauthenticated", "watch"] as const) {
    it(`${kind}: 10 connections x 272 streams; each connection is held to ${streamsAfterRefusal} streams once refused; the flood is answered ${kind === "watch" ? "LIMIT_EXCEEDED beyond the Watch limit" : "UNAUTHENTICATED"}; Execs with the token succeed throughout`, async () => {
      test = await startTestServer({ token }, { sendToken: true });
      const floods = [];
      for (let index = 0; index < 10; index++) {
        const session = await connect(test.server.url);
        sessions.push(session);
        expect(session.remoteSettings.maxConcurrentStreams).toBe(256 + 16);
        floods.push(flood(session, kind, 272));
      }
      // Once refused, a connection that made no call with the token is held to few streams.
      await waitFor(
        () => sessions.every((session) => session.remoteSettings.maxConcurrentStreams === streamsAfterRefusal),
        {
          what: "every flood connection to be held to its few streams",
        },
      );
      for (let index = 0; index < 5; index++) {
        const result = await collectExec(test.client, { command: `echo served ${index}` }, { timeoutMs: 30_000 });
        expect(result.stdout.toString()).toBe(`served ${index}\n`);
      }
      for (const running of floods) running.stop();
      const answers = new Map<string, number>();
      for (const running of floods)
        for (const [status, count] of running.answers) answers.set(status, (answers.get(status) ?? 0) + count);
      const expected = String(kind === "watch" ? Code.ResourceExhausted : Code.Unauthenticated);
      expect(answers.get(expected) ?? 0).toBeGreaterThan(0);
      // Nothing else came back: no call got through. Streams sent past the lowered limit before the
      // client read it are reset by the HTTP/2 layer (REFUSED_STREAM).
      expect([...answers.keys()].filter((status) => status !== expected && status !== "reset")).toEqual([]);
      expect(test.server.manager.list().length).toBe(5);
    });
  }

  it("a client's first burst on a fresh connection, sent before it reads the daemon's SETTINGS, is served: 100 concurrent calls", async () => {
    const started = await startTestServer({ token });
    test = started;
    const client = started.connect(SandboxService, { token });
    const answers = await Promise.all(Array.from({ length: 100 }, () => client.listProcesses({})));
    expect(answers).toHaveLength(100);
  });

  it("a connection refused before its first call with the token is held to few streams, and gets them all back with that call", async () => {
    test = await startTestServer({ token });
    const session = await connect(test.server.url);
    sessions.push(session);
    expect(session.remoteSettings.maxConcurrentStreams).toBe(256 + 16);
    const call = (headers: http2.OutgoingHttpHeaders) => {
      const settings = new Promise<http2.Settings>((resolve) => session.once("remoteSettings", resolve));
      const stream = session.request({
        ":method": "POST",
        ":path": "/sandbox.v1.SandboxService/ListProcesses",
        "content-type": "application/grpc",
        te: "trailers",
        ...headers,
      });
      stream.end(Buffer.alloc(5));
      stream.on("error", () => {});
      stream.resume();
      return settings;
    };
    expect((await call({})).maxConcurrentStreams).toBe(streamsAfterRefusal);
    expect((await call({ authorization: `Bearer ${token}` })).maxConcurrentStreams).toBe(256 + 16);
  });
});
