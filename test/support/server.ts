import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { startServer, type SandboxServer, type SandboxServerOptions } from "../../src/server/index.js";

/** A real server on a free loopback port, a workspace directory of its own and a gRPC client. */
export interface TestServer {
  server: SandboxServer;
  client: Client<typeof SandboxService>;
  /** The workspace root (realpath). */
  workspace: string;
  /** Closes the client session, then the server, then removes the workspace. */
  close(): Promise<void>;
}

/**
 * Starts a server on port 0 with a fresh temporary workspace and a gRPC (HTTP/2) client, which
 * sends `options.token` with every call when `client.sendToken` is set.
 */
export async function startTestServer(options: SandboxServerOptions = {}, client: { sendToken?: boolean } = {}): Promise<TestServer> {
  const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-test-")));
  const server = await startServer({ port: 0, workspaceRoots: [workspace], ...options });
  const sessionManager = new Http2SessionManager(server.url);
  const token = client.sendToken ? options.token : undefined;
  const interceptors: Interceptor[] =
    token === undefined ? [] : [(next) => (request) => (request.header.set("authorization", `Bearer ${token}`), next(request))];
  return {
    server,
    client: createClient(SandboxService, createGrpcTransport({ baseUrl: server.url, sessionManager, interceptors })),
    workspace,
    async close() {
      sessionManager.abort();
      await server.close();
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}
