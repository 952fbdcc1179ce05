import { chmodSync, statSync, writeFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import path from "node:path";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { ProcessService } from "../gen/process/v1/process_pb.js";
import { parseCommandLine } from "../src/cli/sandboxd/options.js";
import { createAgentSandboxRest, metadataEnvironment } from "../src/server/agent-sandbox/index.js";
import { resolveUser } from "../src/process/index.js";
import { startServer } from "../src/server/index.js";
import { createTestCertificates, type TestCertificates } from "./support/certificates.js";
import { expectReason } from "./support/errors.js";
import { rpcError } from "./support/rpc.js";
import { bearer, createWorkspace, startTestServer, type TestServer } from "./support/server.js";

/** A plain HTTP/1.1 request, as curl or the agent-sandbox SDK's `requests` sends it: status, headers and JSON body. */
function rest(
  port: number,
  path: string,
  options: { method?: string; headers?: Record<string, string>; tls?: TestCertificates } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: unknown }> {
  return new Promise((resolve, reject) => {
    const request = (options.tls ? https : http).request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: options.method ?? "GET",
        headers: options.headers,
        ca: options.tls?.ca,
        agent: false,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          resolve({
            status: response.statusCode ?? 0,
            headers: response.headers,
            body: text === "" ? undefined : JSON.parse(text),
          });
        });
      },
    );
    request.on("error", reject);
    request.end();
  });
}

const sessions: Http2SessionManager[] = [];
/** A process.v1 client on a port of the test server (gRPC over HTTP/2). */
function processClient(
  port: number,
  options: { token?: string; tls?: TestCertificates } = {},
): Client<typeof ProcessService> {
  const baseUrl = `${options.tls ? "https" : "http"}://127.0.0.1:${port}`;
  const sessionManager = new Http2SessionManager(baseUrl, undefined, options.tls ? { ca: options.tls.ca } : undefined);
  sessions.push(sessionManager);
  return createClient(
    ProcessService,
    createGrpcTransport({ baseUrl, sessionManager, interceptors: options.token ? [bearer(options.token)] : [] }),
  );
}

let t: TestServer | undefined;
afterEach(async () => {
  for (const session of sessions.splice(0)) session.abort();
  await t?.close();
  t = undefined;
});

describe("the agent-sandbox flags", () => {
  it("--agent-sandbox is KEP-539.2's layout; each port flag or variable moves one, or serves it alone", () => {
    const serve = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
      const command = parseCommandLine(argv, env);
      if (command.kind !== "serve") throw new Error("not serve");
      return command.options.agentSandbox;
    };
    expect(serve([])).toBeUndefined();
    expect(serve(["--agent-sandbox"])).toEqual({ grpcPort: 9090, restPort: 8080, metadataPrefix: undefined });
    expect(serve([], { SANDBOXD_AGENT_SANDBOX: "1" })).toEqual({
      grpcPort: 9090,
      restPort: 8080,
      metadataPrefix: undefined,
    });
    expect(serve(["--agent-sandbox", "--agent-sandbox-rest-port", "18080"])).toEqual({
      grpcPort: 9090,
      restPort: 18080,
      metadataPrefix: undefined,
    });
    expect(
      serve([], { SANDBOXD_AGENT_SANDBOX_GRPC_PORT: "19090", SANDBOXD_AGENT_SANDBOX_METADATA_PREFIX: "AGENT_" }),
    ).toEqual({
      grpcPort: 19090,
      restPort: undefined,
      metadataPrefix: "AGENT_",
    });
    expect(() => serve(["--agent-sandbox-grpc-port", "8080", "--agent-sandbox-rest-port", "8080"])).toThrow(
      "--agent-sandbox-grpc-port and --agent-sandbox-rest-port must differ, both are 8080",
    );
    expect(() => serve(["--agent-sandbox-rest-port", "65536"])).toThrow(
      "--agent-sandbox-rest-port must be an integer from 0 to 65535",
    );
    expect(() => serve(["--agent-sandbox", "--agent-sandbox-metadata-prefix="])).toThrow(
      "--agent-sandbox-metadata-prefix must not be empty",
    );
  });
});

describe("/v1/metadata", () => {
  it("serves only the prefixed variables: never SANDBOXD_*, credential-like names, or a value holding the token", () => {
    const env = {
      SANDBOX_ID: "sb-1",
      SANDBOX_WORKSPACE: "/workspace",
      SANDBOX_API_TOKEN: "a",
      SANDBOX_DB_PASSWORD: "b",
      SANDBOX_SIGNING_KEY: "c",
      SANDBOX_AWS_CREDS: "d",
      SANDBOX_NOTE: "the token is s3cret-token!",
      SANDBOXD_TOKEN: "s3cret-token",
      PATH: "/usr/bin",
    };
    expect(metadataEnvironment(env, { prefix: "SANDBOX_", token: "s3cret-token" })).toEqual({
      SANDBOX_ID: "sb-1",
      SANDBOX_WORKSPACE: "/workspace",
    });
    // A prefix that takes the daemon's own variables in still leaves them out.
    expect(metadataEnvironment(env, { prefix: "SANDBOX" })).toEqual({
      SANDBOX_ID: "sb-1",
      SANDBOX_WORKSPACE: "/workspace",
      SANDBOX_NOTE: "the token is s3cret-token!",
    });
    expect(() => metadataEnvironment(env, { prefix: "" })).toThrow("must not be empty");
  });
});

describe("the KEP-539.2 ports without a token", () => {
  it("serve process.v1 over gRPC, and health, metadata and JSON errors over REST, loopback names only", async () => {
    t = await startTestServer({
      agentSandbox: {
        grpcPort: 0,
        restPort: 0,
        environment: { SANDBOX_ID: "sb-1", SANDBOX_TEMPLATE: "python", OTHER: "no" },
      },
    });
    const ports = t.server.agentSandboxPorts;
    expect(ports.grpc).toBeGreaterThan(0);
    expect(ports.rest).toBeGreaterThan(0);
    expect(new Set([t.server.port, ports.grpc, ports.rest]).size).toBe(3);

    const result = await processClient(ports.grpc!).execute({ config: { command: ["echo", "compat"] } });
    expect(Buffer.from(result.stdout).toString()).toBe("compat\n");

    const health = await rest(ports.rest!, "/v1/health");
    expect(health.status).toBe(200);
    expect(health.headers["content-type"]).toBe("application/json");
    expect(health.body).toEqual({ status: "ok", uptime_seconds: expect.any(Number) as unknown });
    const metadata = await rest(ports.rest!, "/v1/metadata");
    expect(metadata.status).toBe(200);
    expect(metadata.body).toEqual({ env: { SANDBOX_ID: "sb-1", SANDBOX_TEMPLATE: "python" } });
    expect(await rest(ports.rest!, "/v1/nothing")).toMatchObject({
      status: 404,
      body: { code: "NOT_FOUND", message: "no such endpoint: GET /v1/nothing" },
    });
    expect(await rest(ports.rest!, "/v1/metadata", { method: "POST" })).toMatchObject({
      status: 405,
      body: { code: "METHOD_NOT_ALLOWED" },
    });
    // The REST port is not an RPC port.
    expect((await rest(ports.rest!, "/process.v1.ProcessService/Execute", { method: "POST" })).status).toBe(404);

    // Without a token the daemon answers loopback names only, on every port: DNS rebinding reaches nothing.
    for (const path of ["/v1/health", "/v1/metadata"]) {
      expect(await rest(ports.rest!, path, { headers: { host: `rebound.example:${ports.rest}` } })).toEqual({
        status: 403,
        headers: expect.anything() as unknown,
        body: { code: "PERMISSION_DENIED", message: expect.stringContaining("host not allowed") as unknown },
      });
    }
    const rebound = await rest(ports.grpc!, "/process.v1.ProcessService/Execute", {
      method: "POST",
      headers: { host: "rebound.example", "content-type": "application/json" },
    });
    expect(rebound.status).toBe(403);
  });

  it("cannot listen beyond loopback, as the daemon's own port cannot", async () => {
    const workspace = createWorkspace();
    await expect(
      startServer({
        host: "0.0.0.0",
        port: 0,
        workspaceRoots: [workspace],
        agentSandbox: { grpcPort: 0, restPort: 0 },
      }),
    ).rejects.toThrow("refusing to listen on 0.0.0.0 without a token");
  });

  it("give the port back when one cannot listen", async () => {
    const blocker = http.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    const taken = (blocker.address() as { port: number }).port;
    try {
      const workspace = createWorkspace();
      await expect(
        startServer({ port: 0, workspaceRoots: [workspace], agentSandbox: { grpcPort: 0, restPort: taken } }),
      ).rejects.toThrow(/EADDRINUSE/);
    } finally {
      blocker.close();
    }
  });
});

describe("the KEP-539.2 ports with a token", () => {
  it("need the daemon's token on every call but /v1/health", async () => {
    const token = "compat-s3cret";
    t = await startTestServer({
      token,
      agentSandbox: { grpcPort: 0, restPort: 0, environment: { SANDBOX_ID: "sb-2", SANDBOX_COPY: token } },
    });
    const { grpc, rest: restPort } = t.server.agentSandboxPorts;
    expectReason(await rpcError(processClient(grpc!).execute({ config: { command: ["true"] } })), {
      code: Code.Unauthenticated,
      reason: "UNAUTHENTICATED",
    });
    expectReason(await rpcError(processClient(grpc!, { token: "wrong" }).execute({ config: { command: ["true"] } })), {
      code: Code.Unauthenticated,
      reason: "UNAUTHENTICATED",
    });
    expect((await processClient(grpc!, { token }).execute({ config: { command: ["true"] } })).exitCode).toBe(0);

    expect(await rest(restPort!, "/v1/metadata")).toMatchObject({
      status: 401,
      headers: { "www-authenticate": "Bearer" },
      body: { code: "UNAUTHENTICATED", message: "missing bearer token" },
    });
    expect(await rest(restPort!, "/v1/metadata", { headers: { authorization: "Bearer wrong" } })).toMatchObject({
      status: 401,
      body: { code: "UNAUTHENTICATED", message: "invalid bearer token" },
    });
    expect(await rest(restPort!, "/v1/files/anything", { method: "PUT" })).toMatchObject({ status: 401 });
    // With the token the file surface answers there, on the daemon's workspace.
    writeFileSync(path.join(t.workspace, "seen.txt"), "from the workspace");
    const listing = await rest(restPort!, "/v1/files/", { headers: { authorization: `Bearer ${token}` } });
    expect(listing).toMatchObject({
      status: 200,
      body: { entries: [expect.objectContaining({ name: "seen.txt", type: "file", size: 18 })] },
    });
    // The token is never served, even from a variable with the prefix.
    const metadata = await rest(restPort!, "/v1/metadata", { headers: { authorization: `Bearer ${token}` } });
    expect(metadata.status).toBe(200);
    expect(metadata.body).toEqual({ env: { SANDBOX_ID: "sb-2" } });
    // Probes carry no token; with one, any Host is served (the pod's IP, a Service name).
    expect(await rest(restPort!, "/v1/health", { headers: { host: "10.1.2.3:8080" } })).toMatchObject({
      status: 200,
      body: { status: "ok" },
    });
  });

  it("share the daemon's call limits: a call on one port counts against the others", async () => {
    t = await startTestServer({ callLimits: { maxCalls: 1 }, agentSandbox: { grpcPort: 0 } });
    const compat = processClient(t.server.agentSandboxPorts.grpc!);
    const controller = new AbortController();
    const stream = compat
      .start({ config: { command: ["sleep", "1000"] } }, { signal: controller.signal })
      [Symbol.asyncIterator]();
    const init = await stream.next();
    expect(init.value?.event.case).toBe("init");
    const refused = await rpcError(processClient(t.server.port).execute({ config: { command: ["true"] } }));
    expectReason(refused, {
      code: Code.ResourceExhausted,
      reason: "LIMIT_EXCEEDED",
      metadata: { limit: "max-calls", value: "1" },
    });
    controller.abort();
    t.server.manager.getRunning(init.value!.event.value!.processId as number).kill("SIGKILL", -1);
  });
});

describe("the KEP-539.2 ports with TLS", () => {
  let certificates: TestCertificates | undefined;
  afterAll(() => certificates?.remove());

  it("serve HTTPS and gRPC over TLS with the daemon's certificate", async () => {
    certificates = createTestCertificates();
    t = await startTestServer({
      tls: { cert: certificates.serverCert, key: certificates.serverKey },
      agentSandbox: { grpcPort: 0, restPort: 0 },
    });
    const { grpc, rest: restPort } = t.server.agentSandboxPorts;
    expect(await rest(restPort!, "/v1/health", { tls: certificates })).toMatchObject({
      status: 200,
      body: { status: "ok" },
    });
    const result = await processClient(grpc!, { tls: certificates }).execute({
      config: { command: ["echo", "over tls"] },
    });
    expect(Buffer.from(result.stdout).toString()).toBe("over tls\n");
    // Cleartext is not served there.
    await expect(rest(restPort!, "/v1/health")).rejects.toThrow();
  });
});

describe("the REST surface's readiness", () => {
  it("answers 503 in the KEP's error shape once the daemon shuts down", () => {
    let ready = true;
    const surface = createAgentSandboxRest({ ready: () => ready, metadata: {} });
    const answer = (method: string) => {
      const written: { status?: number; body?: string } = {};
      const response = {
        writeHead(status: number) {
          written.status = status;
        },
        end(body?: Buffer) {
          written.body = body?.toString();
        },
      };
      const answered = surface.endpoints.answer({ url: "/v1/health", method, headers: {} } as never, response as never);
      return { answered, ...written };
    };
    expect(answer("GET")).toMatchObject({ answered: true, status: 200 });
    ready = false;
    expect(answer("GET")).toEqual({
      answered: true,
      status: 503,
      body: JSON.stringify({ code: "UNAVAILABLE", message: "sandboxd is shutting down" }),
    });
    expect(answer("HEAD")).toEqual({ answered: true, status: 503, body: undefined });
    expect(answer("POST")).toEqual({ answered: false });
  });
});

describe.skipIf(process.getuid?.() !== 0)("process.v1 under --user", () => {
  it("runs commands as the daemon's command user, as sandbox.v1 does, and its files belong to that user", async () => {
    const token = "user-switch-token";
    const nobody = resolveUser("nobody");
    t = await startTestServer({ token, runAs: nobody, agentSandbox: { grpcPort: 0 } });
    chmodSync(t.workspace, 0o777);
    const compat = processClient(t.server.agentSandboxPorts.grpc!, { token });
    const result = await compat.execute({ config: { command: ["sh", "-c", "id -u; id -g; touch made-here"] } });
    expect(Buffer.from(result.stdout).toString()).toBe(`${nobody.uid}\n${nobody.gid}\n`);
    expect(statSync(path.join(t.workspace, "made-here")).uid).toBe(nobody.uid);
  });
});
