import { setMaxListeners } from "node:events";
import type http2 from "node:http2";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  createProcessManager,
  defaultOutputCapacityBytes,
  type ProcessManager,
  type ProcessManagerOptions,
} from "../process/index.js";
import { ProcessService } from "../../gen/process/v1/process_pb.js";
import { FileService } from "../../gen/sandbox/v1/files_pb.js";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { WorkspaceFiles } from "../files/index.js";
import { createFileMetrics, createFilesRest, FileLimits, type FileLimitOptions } from "./files/index.js";
import {
  assertSafeBinding,
  assertSafeCors,
  assertSafeUserSwitch,
  createHealthStatus,
  type HealthStatus,
  connectionContextValues,
  createCallLimitInterceptor,
  createErrorMessageLimitInterceptor,
  defaultMaxCallsPerConnection,
  defaultMaxMessageBytes,
  type CallLimitOptions,
  shuttingDownError,
} from "./rpc/index.js";
import { createRoutes } from "./routes.js";
import {
  watchSessionLiveness,
  type KeepaliveOptions,
  createGate,
  type Gate,
  type GateOptions,
  type Listener,
  type RequestHandler,
  createHttpEndpoints,
  createListener,
  createTrustedPeers,
  socketOfConnection,
  trustedRequestProblem,
  type TrustedPeers,
  defaultPrefaceTimeoutMs,
  type ListenerOptions,
  type TlsOptions,
  withErrorAnswers,
} from "./http/index.js";
import {
  createDaemonMetrics,
  createLogger,
  createObserveInterceptor,
  createProcessAudit,
  type DaemonMetrics,
} from "./observe.js";
import type { Logger } from "pino";
import {
  createAgentSandboxRest,
  defaultMetadataPrefix,
  metadataEnvironment,
  type RestMount,
} from "./agent-sandbox/index.js";

/** Default port of sandboxd. */
export const defaultPort = 7007;
/** Default address: loopback only. */
export const defaultHost = "127.0.0.1";

/**
 * Streams an HTTP/2 connection may have open once a call of it was refused (no token, a wrong one, a
 * health limit) before any call of it was let through with the token (any call but health on a
 * daemon without one); it gets `--max-calls-per-connection` + 16 back with such a call.
 */
export const streamsAfterRefusal = 16;

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
  /**
   * Origins whose browser pages may call the daemon over Connect and gRPC-Web (CORS); `*` for any,
   * which needs a `token`. None by default.
   */
  corsOrigins?: readonly string[];
  /** Where calls, process starts and exits, and refusals are logged. Default: nowhere (a library stays quiet). */
  logger?: Logger;
  /** Log command lines and arguments in the process audit (they may carry secrets). Default false. */
  logCommands?: boolean;
  /** Serve `GET /metrics` without the token. Default false: with a token, metrics need it too. */
  metricsPublic?: boolean;
  /** Limits of connections: how many, and how long HTTP/1.1 requests and silent connections may take. */
  listener?: Pick<
    ListenerOptions,
    "maxConnections" | "maxConnectionsPerPeer" | "headersTimeoutMs" | "requestTimeoutMs" | "prefaceTimeoutMs"
  >;
  /** Limits of the calls answered without a token (health), and of calls a client resets. */
  gate?: Pick<
    GateOptions,
    | "maxPublicCallsPerConnection"
    | "maxPublicCalls"
    | "maxWatchStreams"
    | "publicRequestTimeoutMs"
    | "maxResetsPerSecond"
  >;
  /**
   * Serve TLS: HTTP/2 and HTTP/1.1 chosen by ALPN, mutual TLS when `clientCa` is set. Cleartext
   * (HTTP/2 and HTTP/1.1 told apart by the connection preface) when undefined.
   */
  tls?: TlsOptions;
  /**
   * The ports of KEP-539.2, the runtime standard of kubernetes-sigs/agent-sandbox, beside the daemon's
   * own; each off unless given. Same host, token, TLS, Host rule and limits as the daemon's port.
   */
  agentSandbox?: AgentSandboxOptions;
  /** Limits of the file service: transfers per connection and in all, watches per connection. */
  fileLimits?: FileLimitOptions;
  /**
   * Most bytes one file read sends of a file without a size (a device such as /dev/zero, a /proc
   * file). Default 64 MiB. Regular files are read up to their size when opened.
   */
  maxUnsizedReadBytes?: number;
}

/** Default ports of KEP-539.2's layout: process.v1 over gRPC, and the REST surface. */
export const agentSandboxDefaultPorts = { grpc: 9090, rest: 8080 } as const;

/** The KEP-539.2 listeners of {@link SandboxServerOptions.agentSandbox}. */
export interface AgentSandboxOptions {
  /**
   * Port serving `process.v1.ProcessService` over gRPC (it serves what the daemon's port serves, which
   * includes it); 0 picks a free one. Off when undefined.
   */
  grpcPort?: number;
  /** Port of the REST surface: `/v1/health`, `/v1/metadata`, `/v1/files/{path}`; 0 picks a free one. Off when undefined. */
  restPort?: number;
  /** Only variables with this prefix are served by `/v1/metadata`. Default {@link defaultMetadataPrefix}. */
  metadataPrefix?: string;
  /** The variables `/v1/metadata` picks from, read at start. Default `process.env`. */
  environment?: Readonly<Record<string, string | undefined>>;
  /** The file surface mounted under `/v1/files/`. Default: the daemon's own (see `createFilesRest`). */
  files?: RestMount;
  /**
   * Networks in CIDR notation (`10.0.0.0/8`; `!` before one leaves it out) whose peers may call the
   * KEP-539.2 ports without the token, as kubernetes-sigs/agent-sandbox's SDKs do (they send no
   * credentials): `process.v1` on the gRPC port and the whole REST surface; everything else of the
   * daemon still needs the token. Never a peer on this machine (loopback, or any address the kernel
   * holds as its own), so a command of the sandbox cannot use it, nor a browser's request or one naming
   * a host other than an address or a cluster service name (see `trustedRequestProblem`). Needs a
   * token; none when undefined or empty.
   */
  trustedPeers?: readonly string[];
}

/** A running sandboxd server. */
export interface SandboxServer {
  /** The port it listens on. */
  readonly port: number;
  /** The address it listens on. */
  readonly host: string;
  /** Base URL for clients, such as `http://127.0.0.1:7007` (`https://` with TLS). */
  readonly url: string;
  /** The ports of the KEP-539.2 listeners that were asked for (see {@link SandboxServerOptions.agentSandbox}). */
  readonly agentSandboxPorts: { readonly grpc?: number; readonly rest?: number };
  /** The process manager behind it. */
  readonly manager: ProcessManager;
  /** Calls in progress (health checks excluded). */
  readonly activeCalls: number;
  /** Serving status answered by `grpc.health.v1.Health`; all NOT_SERVING once `close` is called. */
  readonly health: HealthStatus;
  /** Open client connections (HTTP/2 sessions and HTTP/1.1 connections). */
  readonly connections: number;
  /**
   * Shuts down gracefully: reports NOT_SERVING to health checks and watches, refuses new calls,
   * ends open streams with UNAVAILABLE, kills every process group it started (SIGKILL after
   * `gracePeriodMs`) and closes all connections.
   */
  close(gracePeriodMs?: number): Promise<void>;
}

/** Starts a sandboxd server and resolves once it listens. */
export async function startServer(options: SandboxServerOptions = {}): Promise<SandboxServer> {
  const host = options.host ?? defaultHost;
  assertSafeBinding({ host, token: options.token, insecure: options.insecure });
  // Before anything is created: every variable of the daemon would be served.
  if (options.agentSandbox?.metadataPrefix === "")
    throw new Error("the agent-sandbox metadata prefix must not be empty");
  assertSafeUserSwitch(options);
  assertSafeCors(options);
  const trustedPeers = agentSandboxTrustedPeers(options);
  // Set once the KEP-539.2 listeners listen: the trusted peers' rule holds on their ports only.
  const agentSandboxPorts: { grpc?: number; rest?: number } = {};
  const trustedCalls = (kind: "grpc" | "rest"): GateOptions["trusted"] =>
    trustedPeers === undefined
      ? undefined
      : (service, request, connection) =>
          (kind === "rest" || service === ProcessService.typeName) &&
          socketOfConnection(connection)?.localPort === agentSandboxPorts[kind] &&
          trustedRequestProblem(request.headers) === undefined &&
          trustedPeers.admits(connection);
  const logger = options.logger ?? createLogger({ level: "silent" });
  let listenerForMetrics: { connections: number } | undefined;
  let metrics: DaemonMetrics | undefined;
  const manager = await createProcessManager({
    ...managerOptions(options),
    onOutputBytes: (stream, bytes) => metrics?.outputBytes.inc({ stream }, bytes),
  });
  metrics = createDaemonMetrics({ manager, connections: () => listenerForMetrics?.connections ?? 0 });
  const audit = createProcessAudit(logger, metrics, { logCommands: options.logCommands });
  // Passed to the adapter, which links every call's signal to it (and unlinks it when the call ends):
  // aborted with SHUTTING_DOWN, it ends the streams in progress with UNAVAILABLE.
  const shutdown = new AbortController();
  // Every call in progress listens to it: many at once is the normal case.
  setMaxListeners(0, shutdown.signal);
  const limits = createCallLimitInterceptor(options.callLimits);
  const maxMessageBytes = options.maxMessageBytes ?? defaultMaxMessageBytes;
  const health = createHealthStatus([SandboxService.typeName, FileService.typeName, ProcessService.typeName]);
  // Files as the commands' user, beneath the same workspace roots as their working directories.
  const files = await WorkspaceFiles.create({
    workspaceRoots: manager.workspace.roots,
    user: options.runAs,
    maxUnsizedReadBytes: options.maxUnsizedReadBytes,
  });
  const fileLimits = new FileLimits(options.fileLimits);
  const fileMetrics = createFileMetrics(metrics.registry);
  const adapter = connectNodeAdapter({
    routes: withErrorAnswers(
      createRoutes({ manager, health, audit, files: { files, limits: fileLimits, metrics: fileMetrics } }),
    ),
    shutdownSignal: shutdown.signal,
    interceptors: [
      createObserveInterceptor(logger, metrics),
      createErrorMessageLimitInterceptor(),
      // The token was checked by the gate, on the headers, before this: once is enough.
      limits.interceptor,
    ],
    contextValues: connectionContextValues,
    // Responses are never compressed: command output is often binary or already dense, and gzip
    // halved Exec throughput (256 MiB: 7.8 s with it, 3.5 s without). Compressed requests are accepted.
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    readMaxBytes: maxMessageBytes,
    // An unknown enum name or field in a JSON request is refused (INVALID_ARGUMENT), never dropped: a
    // dropped status filter would match every process.
    jsonOptions: { ignoreUnknownFields: false },
    // GetProcessLogs answers with all retained output of both streams, whatever the request limit.
    writeMaxBytes: Math.max(
      maxMessageBytes,
      2 * (options.outputCapacityBytes ?? defaultOutputCapacityBytes) + 64 * 1024,
    ),
  });
  // The HTTP/2 stream limit sits above the per-connection call limit, so a client normally meets the
  // limit as RESOURCE_EXHAUSTED naming it; the transport's own refusal is the backstop.
  const maxStreams = (options.callLimits?.maxCallsPerConnection ?? defaultMaxCallsPerConnection) + 16;
  // A connection refused before it made a call with the token is held to few streams until it makes
  // one: 100 connections x 272 streams without the token kept the loop busy with 27,200 refusals at
  // a time, and an honest call waited seconds behind them. Every connection starts with all its
  // streams: a client may send a burst before it reads the daemon's SETTINGS, and streams past the
  // limit then would be refused (REFUSED_STREAM), which connect-es does not retry.
  const refusedStreams = Math.min(maxStreams, streamsAfterRefusal);
  const sessions = new WeakSet<object>();
  const limited = new WeakSet<object>();
  // A call refused for an oversized message leaves its stream open until the client ends it, holding
  // session memory; past Node's default of 10 MB the connection refuses new streams with
  // ENHANCE_YOUR_CALM. Room for a few calls at the message limit keeps honest clients clear of it.
  const maxSessionMemoryMb = Math.max(10, Math.ceil((4 * maxMessageBytes + 16 * 1024 * 1024) / (1024 * 1024)));
  // Host and token are checked on the headers, before a byte of a body is read.
  let ready = true;
  const endpoints = createHttpEndpoints({
    corsOrigins: options.corsOrigins,
    ready: () => ready,
    metrics: { registry: metrics.registry, token: options.metricsPublic ? undefined : options.token },
  });
  // KEP-539.2's REST file surface on the same port, behind the same gate, on the same file domain.
  const filesRest = createFilesRest({
    files,
    limits: fileLimits,
    metrics: fileMetrics,
    logger,
    shutdownSignal: shutdown.signal,
  });
  let refusedSinceLog = 0;
  let lastRefusalLog = Number.NEGATIVE_INFINITY;
  const gateOptions = {
    token: options.token,
    // The daemon's gate serves the KEP-539.2 gRPC port too, so the daemon-wide limits stay one.
    trusted: trustedCalls("grpc"),
    anyHost: options.token !== undefined || options.insecure === true,
    endpoints,
    onAuthFailure: (request) => {
      metrics?.authFailures.inc();
      // One line a second at most: a flood of refusals must not become a flood of log writes.
      refusedSinceLog++;
      const now = performance.now();
      if (now - lastRefusalLog < 1000) return;
      lastRefusalLog = now;
      logger.warn(
        {
          procedure: request.url?.split("?")[0].slice(1),
          peer: `${request.socket?.remoteAddress}:${request.socket?.remotePort}`,
          refused: refusedSinceLog,
        },
        "call refused: missing or wrong token",
      );
      refusedSinceLog = 0;
    },
    onRefusedUnproven: (connection) => {
      const session = connection as http2.ServerHttp2Session;
      if (!sessions.has(session) || session.destroyed || session.closed) return;
      limited.add(session);
      session.settings({ maxConcurrentStreams: refusedStreams });
    },
    onProven: (connection) => {
      const session = connection as http2.ServerHttp2Session;
      if (limited.has(session) && !session.destroyed && !session.closed)
        session.settings({ maxConcurrentStreams: maxStreams });
    },
    ...options.gate,
  } satisfies GateOptions;
  const gate = createGate(
    (request, response) => filesRest.answer(request, response) || adapter(request, response),
    gateOptions,
  );
  const admissionTimeoutMs = options.listener?.prefaceTimeoutMs ?? defaultPrefaceTimeoutMs;
  /** A listener of the gate's handler, with the daemon's TLS, HTTP/2 settings, limits and liveness checks. */
  const openListener = (guarded: Gate) =>
    createListener(guarded.serve, {
      ...options.listener,
      tls: options.tls,
      proven: guarded.proven,
      onTurnedAway: (how) => metrics?.connectionsTurnedAway.inc({ how }),
      http2: {
        maxSessionMemory: maxSessionMemoryMb,
        settings: { initialWindowSize: 4 * 1024 * 1024, maxConcurrentStreams: maxStreams },
      },
      onSession: (session) => {
        sessions.add(session);
        watchSessionLiveness(session, options.keepalive);
        // A connection that makes no call it is allowed to make is closed: it holds a session for nothing.
        const unadmitted = setTimeout(() => {
          if (!guarded.admitted(session)) session.destroy();
        }, admissionTimeoutMs);
        unadmitted.unref();
        session.once("close", () => clearTimeout(unadmitted));
      },
    });
  const listener = openListener(gate);
  const extra = agentSandboxListeners(options, {
    daemonGate: gate,
    restTrusted: trustedCalls("rest"),
    files: filesRest.answer,
    openListener,
    gate: (handler, overrides) => createGate(handler, { ...gateOptions, ...overrides }),
    ready: () => ready,
  });
  const listeners = [listener, ...extra.map((entry) => entry.listener)];
  listenerForMetrics = {
    get connections() {
      return listeners.reduce((sum, each) => sum + each.connections, 0);
    },
  };
  let port: number;
  try {
    port = await listener.listen(options.port ?? defaultPort, host);
    for (const entry of extra) agentSandboxPorts[entry.kind] = await entry.listener.listen(entry.port, host);
  } catch (error) {
    // Nothing was served: give back the ports, the cgroups and the state directory's records at once.
    await Promise.all(listeners.map((each) => (each.server.listening ? each.close() : undefined)));
    await manager.shutdown(0);
    await files.close();
    throw error;
  }
  let closing: Promise<void> | undefined;
  return {
    port,
    host,
    url: `${options.tls ? "https" : "http"}://${host.includes(":") ? `[${host}]` : host}:${port}`,
    agentSandboxPorts,
    manager,
    health,
    get activeCalls() {
      return limits.counter.active;
    },
    get connections() {
      return listenerForMetrics!.connections;
    },
    close(gracePeriodMs = 2000) {
      closing ??= (async () => {
        ready = false;
        health.shutdown();
        const closed = Promise.all(listeners.map((each) => each.close()));
        shutdown.abort(shuttingDownError());
        await manager.shutdown(gracePeriodMs);
        for (const each of listeners) each.endConnections();
        const forced = setTimeout(() => {
          for (const each of listeners) each.destroyConnections();
        }, 1000);
        await closed;
        clearTimeout(forced);
        await files.close();
      })();
      return closing;
    },
  };
}

/** The process manager's own fields of the server's options: it never holds the token or the TLS key. */
function managerOptions(options: SandboxServerOptions): ProcessManagerOptions {
  return {
    workspaceRoots: options.workspaceRoots,
    outputCapacityBytes: options.outputCapacityBytes,
    outputHeadBytes: options.outputHeadBytes,
    maxProcesses: options.maxProcesses,
    maxRetainedBytes: options.maxRetainedBytes,
    lingerMs: options.lingerMs,
    baseEnvironment: options.baseEnvironment,
    runAs: options.runAs,
    allowSudo: options.allowSudo,
    launcher: options.launcher,
    stateDirectory: options.stateDirectory,
    log: options.log,
    commandLimits: options.commandLimits,
  };
}

/**
 * The trusted peers of the KEP-539.2 ports (see {@link AgentSandboxOptions.trustedPeers}), checked before
 * anything starts: they need a token (without one every port is loopback only, where no peer is
 * trusted) and a KEP-539.2 port to apply to. Throws an Error that says what is wrong.
 */
function agentSandboxTrustedPeers(options: SandboxServerOptions): TrustedPeers | undefined {
  const networks = options.agentSandbox?.trustedPeers ?? [];
  if (networks.length === 0) return undefined;
  if (options.agentSandbox?.grpcPort === undefined && options.agentSandbox?.restPort === undefined)
    throw new Error("agent-sandbox trusted peers need a KEP-539.2 port (--agent-sandbox or its port flags)");
  if (options.token === undefined)
    throw new Error(
      "agent-sandbox trusted peers need a token: without one the daemon listens on loopback only, where no peer is trusted, " +
        "and with one everything but the KEP-539.2 calls of those peers still needs it; set --token-file or SANDBOXD_TOKEN",
    );
  return createTrustedPeers(networks);
}

/** What {@link agentSandboxListeners} needs of the server it is part of. */
interface ListenerParts {
  /** The gate of the daemon's own port. */
  daemonGate: Gate;
  /** The trusted peers' calls the REST port lets through without the token; none when undefined. */
  restTrusted: GateOptions["trusted"];
  /** The daemon's REST file surface, mounted on the REST port unless the options name another. */
  files: RestMount;
  openListener(gate: Gate): Listener;
  /** A gate with the daemon's options, some replaced. */
  gate(handler: RequestHandler, overrides: Pick<GateOptions, "refuse" | "endpoints" | "trusted">): Gate;
  ready(): boolean;
}

/**
 * The KEP-539.2 listeners asked for: the gRPC one serves the daemon's own gate (so process.v1 and
 * everything else of the daemon's port, under the same daemon-wide limits), the REST one a gate of its
 * own in front of the REST surface, with the same token, Host rule and limits; the trusted peers' calls
 * without a token are let through on these ports only (process.v1 and REST). Not listening yet.
 */
function agentSandboxListeners(options: SandboxServerOptions, parts: ListenerParts) {
  const asked = options.agentSandbox;
  const listeners: { kind: "grpc" | "rest"; port: number; listener: Listener }[] = [];
  if (asked?.grpcPort !== undefined)
    listeners.push({ kind: "grpc", port: asked.grpcPort, listener: parts.openListener(parts.daemonGate) });
  if (asked?.restPort !== undefined) {
    const rest = createAgentSandboxRest({
      ready: parts.ready,
      metadata: metadataEnvironment(asked.environment ?? process.env, {
        prefix: asked.metadataPrefix ?? defaultMetadataPrefix,
        token: options.token,
      }),
      files: asked.files ?? parts.files,
    });
    listeners.push({
      kind: "rest",
      port: asked.restPort,
      listener: parts.openListener(
        parts.gate(rest.handler, {
          refuse: rest.refuse,
          endpoints: rest.endpoints,
          trusted: parts.restTrusted,
        }),
      ),
    });
  }
  return listeners;
}
