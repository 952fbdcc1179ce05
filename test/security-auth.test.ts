import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { parseCommandLine } from "../src/cli/sandboxd/options.js";
import { assertSafeBinding, createAuthInterceptor, isLoopbackHost, resolveToken } from "../src/server/index.js";
import { Code, collectExec, rpcError, streamError } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const token = "s3cret-token-for-tests-0123456789";

function bearer(value: string): Interceptor {
  return (next) => (request) => {
    request.header.set("authorization", `Bearer ${value}`);
    return next(request);
  };
}

describe("bearer token auth against a real server", () => {
  let test: TestServer;
  const managers: Http2SessionManager[] = [];
  const clientWith = (interceptors: Interceptor[]) => {
    const sessionManager = new Http2SessionManager(test.server.url);
    managers.push(sessionManager);
    return createClient(
      SandboxService,
      createGrpcTransport({ baseUrl: test.server.url, sessionManager, interceptors }),
    );
  };

  beforeAll(async () => {
    test = await startTestServer({ token });
  });
  afterAll(async () => {
    for (const manager of managers) manager.abort();
    await test.close();
  });

  it("refuses unary calls, server streams and bidi streams without a token with UNAUTHENTICATED", async () => {
    const client = test.client;
    const unary = await rpcError(client.listProcesses({}));
    expect(unary.code).toBe(Code.Unauthenticated);
    expect(unary.rawMessage).toBe("missing bearer token");
    const exec = await streamError(client.exec({ spec: { command: "echo never" } }));
    expect(exec.code).toBe(Code.Unauthenticated);
    const logs = await streamError(client.streamLogs({ processId: "x", follow: true }));
    expect(logs.code).toBe(Code.Unauthenticated);
    async function* input() {
      yield { input: { case: "open" as const, value: { processId: "x" } } };
    }
    const bidi = await streamError(client.sendInput(input()));
    expect(bidi.code).toBe(Code.Unauthenticated);
    // Nothing ran: the refused Exec never reached the process manager.
    expect(test.server.manager.list()).toHaveLength(0);
  });

  it("refuses a wrong token, a token with a suffix and a non-bearer scheme", async () => {
    for (const interceptors of [
      [bearer("wrong")],
      [bearer(`${token}x`)],
      [bearer(token.slice(0, -1))],
      [
        ((next) => (request) => {
          request.header.set("authorization", `Basic ${token}`);
          return next(request);
        }) satisfies Interceptor,
      ],
    ]) {
      const error = await rpcError(clientWith(interceptors).listProcesses({}));
      expect(error.code).toBe(Code.Unauthenticated);
      expect(error.rawMessage).toBe("invalid bearer token");
      expect(error.message).not.toContain(token);
    }
  });

  it("serves every protocol with the right token", async () => {
    const result = await collectExec(clientWith([bearer(token)]), { command: "echo hello" });
    expect(result.stdout.toString()).toBe("hello\n");
    for (const create of [createConnectTransport, createGrpcWebTransport]) {
      const authorized = createClient(
        SandboxService,
        create({ baseUrl: test.server.url, httpVersion: "2", interceptors: [bearer(token)] }),
      );
      await expect(authorized.listProcesses({})).resolves.toBeDefined();
      const anonymous = createClient(SandboxService, create({ baseUrl: test.server.url, httpVersion: "2" }));
      expect((await rpcError(anonymous.listProcesses({}))).code).toBe(Code.Unauthenticated);
      expect((await streamError(anonymous.exec({ spec: { command: "true" } }))).code).toBe(Code.Unauthenticated);
    }
  });

  it("never passes the token or the daemon's NODE_OPTIONS to a child", async () => {
    const before = { token: process.env.SANDBOXD_TOKEN, node: process.env.NODE_OPTIONS };
    process.env.SANDBOXD_TOKEN = token;
    process.env.NODE_OPTIONS = "--max-old-space-size=123";
    let separate: TestServer | undefined;
    try {
      // The base environment is taken when the manager is built: build one with the variables set.
      separate = await startTestServer({ token });
      const client = createClient(
        SandboxService,
        createGrpcTransport({ baseUrl: separate.server.url, interceptors: [bearer(token)] }),
      );
      const result = await collectExec(client, { command: "env; cat /proc/self/environ | tr '\\0' '\\n'" });
      const output = result.stdout.toString();
      expect(output).toContain("PATH=");
      expect(output).not.toContain(token);
      expect(output).not.toContain("SANDBOXD_TOKEN");
      expect(output).not.toContain("NODE_OPTIONS");
      expect(output).not.toContain("max-old-space-size");
    } finally {
      process.env.SANDBOXD_TOKEN = before.token;
      if (before.token === undefined) delete process.env.SANDBOXD_TOKEN;
      process.env.NODE_OPTIONS = before.node;
      if (before.node === undefined) delete process.env.NODE_OPTIONS;
      await separate?.close();
    }
  });
});

describe("the auth interceptor built directly", () => {
  const call = (service: string, authorization?: string) => {
    const interceptor = createAuthInterceptor({ token });
    const header = new Headers(authorization === undefined ? {} : { authorization });
    const request = { service: { typeName: service }, header } as unknown as Parameters<ReturnType<Interceptor>>[0];
    return interceptor(async () => "served" as never)(request);
  };

  it("lets grpc.health.v1.Health answer without a token and nothing else", async () => {
    await expect(call("grpc.health.v1.Health")).resolves.toBe("served");
    await expect(call("grpc.reflection.v1.ServerReflection")).rejects.toMatchObject({ code: Code.Unauthenticated });
    await expect(call("sandbox.v1.SandboxService")).rejects.toMatchObject({ code: Code.Unauthenticated });
    await expect(call("sandbox.v1.SandboxService", `bearer ${token}`)).resolves.toBe("served");
  });

  it("refuses an empty token at construction", () => {
    expect(() => createAuthInterceptor({ token: "" })).toThrow("must not be empty");
  });
});

describe("where the token comes from", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), "sandboxd-token-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("reads --token, then --token-file, then SANDBOXD_TOKEN", () => {
    const file = path.join(dir, "token");
    writeFileSync(file, "from-file\n", { mode: 0o600 });
    chmodSync(file, 0o600);
    expect(resolveToken({ token: "flag", tokenFile: file, env: { SANDBOXD_TOKEN: "env" } })).toBe("flag");
    expect(resolveToken({ tokenFile: file, env: { SANDBOXD_TOKEN: "env" } })).toBe("from-file");
    expect(resolveToken({ env: { SANDBOXD_TOKEN: "env" } })).toBe("env");
    expect(resolveToken({ env: {} })).toBeUndefined();
  });

  it("refuses a token file readable by group or others, without printing the token", () => {
    const file = path.join(dir, "open-token");
    writeFileSync(file, "leaky-token");
    for (const mode of [0o644, 0o640, 0o604, 0o660]) {
      chmodSync(file, mode);
      let message = "";
      try {
        resolveToken({ tokenFile: file });
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).toContain("must be 0600 or stricter");
      expect(message).not.toContain("leaky-token");
    }
    chmodSync(file, 0o400);
    expect(resolveToken({ tokenFile: file })).toBe("leaky-token");
    expect(readFileSync(file, "utf8")).toBe("leaky-token");
  });

  it("refuses an empty token", () => {
    expect(() => resolveToken({ token: "  " })).toThrow("the token is empty");
  });

  it("the README's security example parses as written, with the token from the file", () => {
    const readme = readFileSync(path.join(import.meta.dirname, "..", "README.md"), "utf8");
    const security = readme.slice(readme.indexOf("## Security"));
    const line = /^npx sandboxd (.*)$/m.exec(security)?.[1];
    expect(line).toBeDefined();
    const file = path.join(dir, "token");
    writeFileSync(file, "readme-token\n", { mode: 0o600 });
    const argv = line!.split(" ").map((word) => (word === "/etc/sandboxd/token" ? file : word));
    const command = parseCommandLine(argv, {});
    expect(command.kind).toBe("serve");
    if (command.kind !== "serve") return;
    expect(command.options).toMatchObject({
      host: "0.0.0.0",
      token: "readme-token",
      runAs: { name: "nobody" },
      stateDirectory: "/var/lib/sandboxd",
      workspaceRoots: ["/srv/work"],
    });
  });

  it("accepts a group-readable token file only inside systemd's $CREDENTIALS_DIRECTORY", () => {
    const credentials = path.join(dir, "credentials");
    mkdirSync(credentials);
    const inside = path.join(credentials, "token");
    writeFileSync(inside, "credential-token\n", { mode: 0o440 });
    chmodSync(inside, 0o440);
    expect(resolveToken({ tokenFile: inside, env: { CREDENTIALS_DIRECTORY: credentials } })).toBe("credential-token");
    expect(() => resolveToken({ tokenFile: inside, env: {} })).toThrow("must be 0600 or stricter");
    const outside = path.join(dir, "outside-token");
    writeFileSync(outside, "t", { mode: 0o440 });
    chmodSync(outside, 0o440);
    expect(() => resolveToken({ tokenFile: outside, env: { CREDENTIALS_DIRECTORY: credentials } })).toThrow(
      "must be 0600 or stricter",
    );
    // A symlink placed in the directory that points outside it is not inside.
    symlinkSync(outside, path.join(credentials, "link"));
    expect(() =>
      resolveToken({ tokenFile: path.join(credentials, "link"), env: { CREDENTIALS_DIRECTORY: credentials } }),
    ).toThrow("must be 0600 or stricter");
  });

  it("the command line refuses a 0644 token file", () => {
    const file = path.join(dir, "cli-token");
    writeFileSync(file, "t");
    chmodSync(file, 0o644);
    expect(() => parseCommandLine(["--token-file", file], {})).toThrow("must be 0600 or stricter");
  });
});

describe("binding to the network", () => {
  it("knows loopback addresses", () => {
    for (const host of ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"])
      expect(isLoopbackHost(host)).toBe(true);
    for (const host of ["0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "example.com", "128.0.0.1"])
      expect(isLoopbackHost(host)).toBe(false);
  });

  it("refuses a non-loopback address without a token unless --insecure", async () => {
    expect(() => assertSafeBinding({ host: "0.0.0.0" })).toThrow("refusing to listen on 0.0.0.0 without a token");
    expect(() => assertSafeBinding({ host: "0.0.0.0", token })).not.toThrow();
    expect(() => assertSafeBinding({ host: "0.0.0.0", insecure: true })).not.toThrow();
    await expect(startTestServer({ host: "0.0.0.0" })).rejects.toThrow("without a token");
    const open = await startTestServer({ host: "0.0.0.0", insecure: true });
    await open.close();
  });
});
