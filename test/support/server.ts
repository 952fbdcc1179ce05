import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { DescService } from "@bufbuild/protobuf";
import { createClient, createRouterTransport, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { createProcessManager, type ProcessManager, type ProcessManagerOptions } from "../../src/process/index.js";
import { createRoutes, startServer, type SandboxServer, type SandboxServerOptions } from "../../src/server/index.js";
import { shuttingDownError } from "../../src/server/rpc/errors.js";
import { withErrorAnswers } from "../../src/server/http/error-answers.js";
import { FileLimits } from "../../src/server/files/index.js";
import { WorkspaceFiles } from "../../src/files/index.js";

/** A fresh temporary directory (realpath) for a test's workspace; remove it when done. */
export function createWorkspace(prefix = "sandboxd-test-"): string {
  return realpathSync(mkdtempSync(path.join(tmpdir(), prefix)));
}

/** Options of {@link TestServer.connect}. */
export interface ConnectOptions {
  /** Send this bearer token with every call. */
  token?: string;
  /** More interceptors of the client. */
  interceptors?: Interceptor[];
}

/** A real server on a free loopback port, a workspace directory of its own and a gRPC client. */
export interface TestServer {
  server: SandboxServer;
  client: Client<typeof SandboxService>;
  /** The workspace root (realpath). */
  workspace: string;
  /**
   * A gRPC client of `service` (SandboxService by default) on an HTTP/2 connection of its own,
   * aborted by {@link close}.
   */
  connect<T extends DescService = typeof SandboxService>(service?: T, options?: ConnectOptions): Client<T>;
  /** Closes every client connection, then the server, then removes the workspace. Idempotent. */
  close(): Promise<void>;
}

/**
 * Starts a server on port 0 with a fresh temporary workspace and a gRPC (HTTP/2) client, which
 * sends `options.token` with every call when `client.sendToken` is set.
 */
export async function startTestServer(
  options: SandboxServerOptions = {},
  client: { sendToken?: boolean } = {},
): Promise<TestServer> {
  const workspace = createWorkspace();
  const server = await startServer({ port: 0, workspaceRoots: [workspace], ...options });
  const sessions: Http2SessionManager[] = [];
  const connect = <T extends DescService>(service: T, connectOptions: ConnectOptions = {}): Client<T> => {
    const sessionManager = new Http2SessionManager(server.url);
    sessions.push(sessionManager);
    const interceptors = [
      ...(connectOptions.token === undefined ? [] : [bearer(connectOptions.token)]),
      ...(connectOptions.interceptors ?? []),
    ];
    return createClient(service, createGrpcTransport({ baseUrl: server.url, sessionManager, interceptors }));
  };
  let closing: Promise<void> | undefined;
  return {
    server,
    client: connect(SandboxService, { token: client.sendToken ? options.token : undefined }),
    workspace,
    connect: (service, connectOptions) =>
      connect(service ?? (SandboxService as unknown as NonNullable<typeof service>), connectOptions),
    close() {
      closing ??= (async () => {
        for (const session of sessions) session.abort();
        await server.close();
        rmSync(workspace, { recursive: true, force: true });
      })();
      return closing;
    },
  };
}

/** An interceptor that sends `Authorization: Bearer <token>`. */
export function bearer(token: string): Interceptor {
  return (next) => (request) => {
    request.header.set("authorization", `Bearer ${token}`);
    return next(request);
  };
}

/** A process manager on a fresh workspace, for tests of src/process without any RPC. */
export interface TestManager {
  manager: ProcessManager;
  /** The workspace root (realpath). */
  workspace: string;
  /** Shuts the manager down (SIGKILL after `gracePeriodMs`) and removes the workspace. */
  close(gracePeriodMs?: number): Promise<void>;
}

/** Creates a process manager on a fresh temporary workspace. */
export async function startTestManager(options: ProcessManagerOptions = {}): Promise<TestManager> {
  const workspace = createWorkspace("sandboxd-manager-");
  const manager = await createProcessManager({ workspaceRoots: [workspace], ...options });
  return {
    manager,
    workspace,
    async close(gracePeriodMs = 100) {
      await manager.shutdown(gracePeriodMs);
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}

/**
 * The service tier without a network: the routes the daemon serves (SandboxService, FileService,
 * process.v1, health, reflection, with the same error answers) behind `createRouterTransport`, on a
 * real process manager and the real file domain, so handler logic is tested fast and processes and
 * files are real.
 */
export interface InMemoryService<T extends DescService = typeof SandboxService> {
  client: Client<T>;
  manager: ProcessManager;
  workspace: string;
  /** Ends every call as the daemon's shutdown does (SHUTTING_DOWN), without closing anything else. */
  shutdownCalls(): void;
  /** Shuts the manager down and removes the workspace. */
  close(): Promise<void>;
}

/** Creates the in-memory tier: see {@link InMemoryService}. */
export async function startInMemoryService<T extends DescService = typeof SandboxService>(
  options: ProcessManagerOptions & { service?: T } = {},
): Promise<InMemoryService<T>> {
  const { service, ...managerOptions } = options;
  const { manager, workspace, close } = await startTestManager(managerOptions);
  const shutdown = new AbortController();
  // The file service on the same workspace, as the daemon serves it (the daemon's own user: no --user here).
  const files = await WorkspaceFiles.create({ workspaceRoots: manager.workspace.roots });
  const transport = createRouterTransport(
    withErrorAnswers(createRoutes({ manager, files: { files, limits: new FileLimits() } })),
    { router: { shutdownSignal: shutdown.signal } },
  );
  return {
    client: createClient(service ?? (SandboxService as unknown as T), transport),
    manager,
    workspace,
    shutdownCalls: () => shutdown.abort(shuttingDownError()),
    close: async () => {
      await files.close();
      await close();
    },
  };
}
