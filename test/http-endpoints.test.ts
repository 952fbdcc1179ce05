import http from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { startServer } from "../src/server/index.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { waitFor } from "./support/processes.js";
import { runCommand } from "./support/tools.js";

/** One HTTP/1.1 request on `agent`'s kept-alive connections; resolves with status, headers and body. */
function request(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string; agent?: http.Agent } = {},
) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    const call = http.request(
      url,
      { method: init.method ?? "GET", headers: init.headers, agent: init.agent },
      (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (text: string) => (body += text));
        response.on("end", () => resolve({ status: response.statusCode!, headers: response.headers, body }));
      },
    );
    call.on("error", reject);
    call.end(init.body);
  });
}

describe("health over plain HTTP, for probes that cannot speak gRPC", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("GET /healthz and /readyz answer 200 without a token; /readyz turns 503 once shutdown begins", async () => {
    test = await startTestServer({ token: "probe-token" });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      expect(await request(`${test.server.url}/healthz`, { agent })).toMatchObject({ status: 200, body: "ok\n" });
      expect(await request(`${test.server.url}/readyz`, { agent })).toMatchObject({ status: 200, body: "ok\n" });
      // A command that ignores SIGTERM holds the shutdown for its grace period.
      await test.client.startProcess(
        { spec: { command: "trap '' TERM; sleep 30" } },
        { headers: { authorization: "Bearer probe-token" } },
      );
      await waitFor(() => test!.server.manager.liveProcessCount === 1, { what: "the process to run" });
      const closing = test.server.close(3000);
      const during = await request(`${test.server.url}/readyz`, { agent });
      expect(during).toMatchObject({ status: 503, body: "shutting down\n" });
      expect((await request(`${test.server.url}/healthz`, { agent })).status).toBe(200);
      await closing;
    } finally {
      agent.destroy();
    }
  });
});

describe("CORS for browser pages on other origins", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("preflights of an allowed origin get connect's header lists; others get none; answers carry the origin", async () => {
    test = await startTestServer({ corsOrigins: ["https://ide.example.com"] });
    const path = `${test.server.url}/sandbox.v1.SandboxService/ListProcesses`;
    const preflight = await request(path, {
      method: "OPTIONS",
      headers: {
        origin: "https://ide.example.com",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,connect-protocol-version",
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers["access-control-allow-origin"]).toBe("https://ide.example.com");
    expect(preflight.headers["access-control-allow-methods"]).toBe("POST, GET");
    for (const header of ["Content-Type", "Connect-Protocol-Version", "X-Grpc-Web", "Authorization"]) {
      expect(preflight.headers["access-control-allow-headers"]).toContain(header);
    }
    const stranger = await request(path, {
      method: "OPTIONS",
      headers: { origin: "https://evil.example.com", "access-control-request-method": "POST" },
    });
    expect(stranger.status).toBe(403);
    expect(stranger.headers["access-control-allow-origin"]).toBeUndefined();

    const call = await request(path, {
      method: "POST",
      headers: {
        origin: "https://ide.example.com",
        "content-type": "application/json",
        "connect-protocol-version": "1",
      },
      body: "{}",
    });
    expect(call.status).toBe(200);
    expect(call.headers["access-control-allow-origin"]).toBe("https://ide.example.com");
    expect(call.headers["access-control-expose-headers"]).toContain("Grpc-Status");
  });
});

describe("a daemon without a token stays closed to web pages", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("refuses --cors-origin * at start, through startServer and the command line; a named origin or a token is fine", async () => {
    await expect(startServer({ port: 0, corsOrigins: ["*"] })).rejects.toThrow(
      /refusing --cors-origin \* without a token: any web page/,
    );
    await expect(startServer({ port: 0, corsOrigins: ["https://ide.example.com", "*"] })).rejects.toThrow(
      /refusing --cors-origin \*/,
    );
    // Undefined: left out of the daemon's environment, whatever this one has.
    const environment = { SANDBOXD_CORS_ORIGINS: "*", SANDBOXD_TOKEN: undefined, SANDBOXD_TOKEN_FILE: undefined };
    const refused = await runCommand(
      process.execPath,
      ["--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--log-format", "json"],
      { env: environment },
    );
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain("refusing --cors-origin * without a token");
    test = await startTestServer({ corsOrigins: ["*"], token: "cors-token" });
    await test.close();
    test = await startTestServer({ corsOrigins: ["https://ide.example.com"] });
  });

  it("answers GET /metrics, like every call, only to a loopback Host", async () => {
    test = await startTestServer();
    const { port } = test.server;
    const foreign = await request(`${test.server.url}/metrics`, { headers: { host: `evil.example:${port}` } });
    expect(foreign.status).toBe(403);
    expect(foreign.body).toContain("host not allowed");
    expect(foreign.body).not.toContain("sandboxd_");
    const rebound = await request(`${test.server.url}/sandbox.v1.SandboxService/ListProcesses`, {
      method: "POST",
      headers: { host: `evil.example:${port}`, "content-type": "application/json" },
      body: "{}",
    });
    expect(rebound.status).toBe(403);
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`]) {
      const own = await request(`${test.server.url}/metrics`, { headers: { host } });
      expect(own.status).toBe(200);
      expect(own.body).toMatch(/^sandboxd_connections \d+$/m);
    }
  });
});
