import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { createProcessManager, type ProcessManager, type ProcessManagerOptions } from "../process/index.js";
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
  /**
   * Shuts down gracefully: refuses new calls, ends open streams with UNAVAILABLE, kills every
   * process group it started (SIGKILL after `gracePeriodMs`) and closes all connections.
   */
  close(gracePeriodMs?: number): Promise<void>;
}

/** Starts a sandboxd server and resolves once it listens. */
export async function startServer(options: SandboxServerOptions = {}): Promise<SandboxServer> {
  const manager = await createProcessManager(options);
  const shutdown = new AbortController();
  const handler = connectNodeAdapter({ routes: createRoutes({ manager, shutdownSignal: shutdown.signal }) });
  const server = http2.createServer({ settings: { initialWindowSize: 4 * 1024 * 1024 } }, handler);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  const host = options.host ?? defaultHost;
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
