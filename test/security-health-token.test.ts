import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ token: "s3cret-token-for-health-test" });
});
afterAll(async () => {
  await t.close();
});

describe("a daemon with a token", () => {
  it("answers health checks without one, as probes ask, and nothing else", async () => {
    const health = t.connect(Health);
    expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await health.check({ service: "sandbox.v1.SandboxService" })).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );

    // The test client of startTestServer sends no token either.
    const refused = await t.client.listProcesses({}).catch((error: unknown) => ConnectError.from(error));
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).code).toBe(Code.Unauthenticated);

    const reflection = t.connect(ServerReflection);
    async function* listServices() {
      yield { messageRequest: { case: "listServices" as const, value: "" } };
    }
    const reflected = await (async () => {
      for await (const _ of reflection.serverReflectionInfo(listServices())) return undefined;
    })().catch((error: unknown) => ConnectError.from(error));
    expect((reflected as ConnectError).code).toBe(Code.Unauthenticated);
  });
});
