import { Code, type Client } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../gen/grpc/health/v1/health_pb.js";
import { ProcessStatus } from "../gen/sandbox/v1/sandbox_pb.js";
import { waitFor } from "./support/processes.js";
import { rpcError } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

describe("grpc.health.v1.Health against a real server", () => {
  let test: TestServer;
  let health: Client<typeof Health>;

  beforeAll(async () => {
    test = await startTestServer();
    health = test.connect(Health);
  });
  afterAll(async () => {
    await test.close();
  });

  it("answers SERVING for the server and for sandbox.v1.SandboxService", async () => {
    expect((await health.check({ service: "" })).status).toBe(ServingStatus.SERVING);
    expect((await health.check({ service: "sandbox.v1.SandboxService" })).status).toBe(ServingStatus.SERVING);
  });

  it("answers NOT_FOUND for a service it does not check", async () => {
    const error = await rpcError(health.check({ service: "other.v1.Other" }));
    expect(error.code).toBe(Code.NotFound);
    expect(error.rawMessage).toBe("unknown service: other.v1.Other");
  });

  it("lists every checked service", async () => {
    const { statuses } = await health.list({});
    expect(Object.fromEntries(Object.entries(statuses).map(([name, response]) => [name, response.status]))).toEqual({
      "": ServingStatus.SERVING,
      "sandbox.v1.SandboxService": ServingStatus.SERVING,
      "sandbox.v1.FileService": ServingStatus.SERVING,
      "process.v1.ProcessService": ServingStatus.SERVING,
    });
  });

  it("watches: the current status at once, then each change, SERVICE_UNKNOWN for an unknown service", async () => {
    const controller = new AbortController();
    const seen: ServingStatus[] = [];
    const watching = (async () => {
      for await (const response of health.watch({ service: "later.v1.Later" }, { signal: controller.signal }))
        seen.push(response.status);
    })().catch(() => {});
    await waitFor(() => seen.length === 1, { what: "the first watch answer" });
    expect(seen).toEqual([ServingStatus.SERVICE_UNKNOWN]);
    test.server.health.set("later.v1.Later", ServingStatus.SERVING);
    await waitFor(() => seen.length === 2, { what: "the change to SERVING" });
    test.server.health.set("later.v1.Later", ServingStatus.NOT_SERVING);
    await waitFor(() => seen.length === 3, { what: "the change to NOT_SERVING" });
    expect(seen).toEqual([ServingStatus.SERVICE_UNKNOWN, ServingStatus.SERVING, ServingStatus.NOT_SERVING]);
    controller.abort();
    await watching;
    expect((await health.check({ service: "later.v1.Later" })).status).toBe(ServingStatus.NOT_SERVING);
  });
});

describe("health while the server shuts down", () => {
  it("turns NOT_SERVING for Check and Watch, then ends the watch with UNAVAILABLE", async () => {
    const test = await startTestServer();
    const health = test.connect(Health);
    try {
      // A process that ignores SIGTERM holds the shutdown in its grace period: time to ask.
      await test.client.startProcess({ spec: { command: "trap '' TERM; sleep 30", processId: "stubborn" } });
      await waitFor(
        async () => (await test.client.getProcess({ processId: "stubborn" })).process?.status === ProcessStatus.RUNNING,
      );
      const seen: ServingStatus[] = [];
      const watching = (async () => {
        for await (const response of health.watch({ service: "sandbox.v1.SandboxService" })) seen.push(response.status);
      })();
      // Its end is taken at once, so the UNAVAILABLE it ends with is never an unhandled rejection.
      const watchEnd = rpcError(watching);
      await waitFor(() => seen.length === 1, { what: "the first watch answer" });
      const closing = test.server.close(1500);
      // The connection stays open while the grace period runs: health says the server is going.
      expect((await health.check({ service: "" })).status).toBe(ServingStatus.NOT_SERVING);
      expect((await health.check({ service: "sandbox.v1.SandboxService" })).status).toBe(ServingStatus.NOT_SERVING);
      expect((await watchEnd).code).toBe(Code.Unavailable);
      expect(seen).toEqual([ServingStatus.SERVING, ServingStatus.NOT_SERVING]);
      await closing;
    } finally {
      await test.close();
    }
  });
});
