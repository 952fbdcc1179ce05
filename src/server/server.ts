import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { createProcessManager, defaultOutputCapacityBytes, type ProcessManager, type ProcessManagerOptions } from "../process/index.js";
import { assertSafeBinding, createAuthInterceptor } from "./auth.js";
import { watchSessionLiveness, type KeepaliveOptions } from "./keepalive.js";
import {
  connectionContextValues,
  createCallLimitInterceptor,
  createErrorMessageLimitInterceptor,
  defaultMaxCallsPerConnection,
  defaultMaxMessageBytes,
  type CallLimitOptions,
} from "./limits.js";
import { createRoutes } from "./routes.js";

/** Default port of sandboxd. */
export const defaultPort = 7007;
/** Default address: loopback only. */
export const defaultHost = "127.0.0.1";

/** Options for {@link startServer}. */
export interface SandboxServerOptions extends ProcessManagerOptions {
  /** Address to listen on. Default {@link defaultHost}. */
  host?: string;
  /** Port to listen on; 0 picks a free one. Default {@link defaultPort}. */
  port?: number;
  /** Bearer token required on every call but health; none when undefined (loopback only, see `insecure`). */
  token?: string;
  /** Allow a non-loopback `host` without a token. Default false. */
  insecure?: boolean;
  /**
   * Largest request message in bytes (Default 4 MiB). Responses may be larger, up to the retained
   * output of a process (GetProcessLogs).
   */
  maxMessageBytes?: number;
  /** Limits on calls in progress, per connection and in all. */
  callLimits?: CallLimitOptions;
  /** Keepalive pings that find dead peers. */
  keepalive?: KeepaliveOptions;
}

/** A running sandboxd server. */
export interface SandboxServer {
  /** The port it listens on. */
  readonly port: number;
  /** The address it listens on. */
  readonly host: string;
  /** Base URL for clients, such as `http://127.0.0.1:7007`. */
  readonly url: string;
  /** The process manager behind it. */
  readonly manager: ProcessManager;
  /** Calls in progress (health checks excluded). */
  readonly activeCalls: number;
  /** Open client connections (HTTP/2 sessions). */
  readonly connections: number;
  /**
   * Shuts down gracefully: refuses new calls, ends open streams with UNAVAILABLE, kills every
   * process group it started (SIGKILL after `gracePeriodMs`) and closes all connections.
   */
  close(gracePeriodMs?: number): Promise<void>;
}

/** Starts a sandboxd server and resolves once it listens. */
export async function startServer(options: SandboxServerOptions = {}): Promise<SandboxServer> {
  const host = options.host ?? defaultHost;
  assertSafeBinding({ host, token: options.token, insecure: options.insecure });
  const manager = await createProcessManager(options);
  const shutdown = new AbortController();
  const limits = createCallLimitInterceptor(options.callLimits);
  const maxMessageBytes = options.maxMessageBytes ?? defaultMaxMessageBytes;
  const handler = connectNodeAdapter({
    routes: createRoutes({ manager, shutdownSignal: shutdown.signal }),
    // Auth first: an unauthenticated call must not even count against the limits.
    interceptors: [
      createErrorMessageLimitInterceptor(),
      ...(options.token !== undefined ? [createAuthInterceptor({ token: options.token })] : []),
      limits.interceptor,
    ],
    contextValues: connectionContextValues,
    readMaxBytes: maxMessageBytes,
    // GetProcessLogs answers with all retained output of both streams, whatever the request limit.
    writeMaxBytes: Math.max(maxMessageBytes, 2 * (options.outputCapacityBytes ?? defaultOutputCapacityBytes) + 64 * 1024),
  });
  // The HTTP/2 stream limit sits above the per-connection call limit, so a client normally meets the
  // limit as RESOURCE_EXHAUSTED naming it; the transport's own refusal is the backstop.
  const maxStreams = (options.callLimits?.maxCallsPerConnection ?? defaultMaxCallsPerConnection) + 16;
  // A call refused for an oversized message leaves its stream open until the client ends it, holding
  // session memory; past Node's default of 10 MB the connection refuses new streams with
  // ENHANCE_YOUR_CALM. Room for a few calls at the message limit keeps honest clients clear of it.
  const maxSessionMemoryMb = Math.max(10, Math.ceil((4 * maxMessageBytes + 16 * 1024 * 1024) / (1024 * 1024)));
  const server = http2.createServer(
    { maxSessionMemory: maxSessionMemoryMb, settings: { initialWindowSize: 4 * 1024 * 1024, maxConcurrentStreams: maxStreams } },
    handler,
  );
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    watchSessionLiveness(session, options.keepalive);
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? defaultPort, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  let closing: Promise<void> | undefined;
  return {
    port,
    host,
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    manager,
    get activeCalls() {
      return limits.counter.active;
    },
    get connections() {
      return sessions.size;
    },
    close(gracePeriodMs = 2000) {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        shutdown.abort();
        await manager.shutdown(gracePeriodMs);
        for (const session of sessions) session.close();
        const forced = setTimeout(() => {
          for (const session of sessions) session.destroy();
        }, 1000);
        await closed;
        clearTimeout(forced);
      })();
      return closing;
    },
  };
}
