import { readFileSync } from "node:fs";
import {
  type SandboxServerOptions,
  type TlsOptions,
  agentSandboxDefaultPorts,
  defaultHost,
  defaultPort,
  resolveToken,
  logLevels,
  type AgentSandboxOptions,
  type LogLevel,
} from "../../server/index.js";
import { Launcher, resolveUser } from "../../process/index.js";
import { daemonUsage, readDaemonFlags, type DaemonFlagValues } from "./flags.js";

/** The daemon's command-line help. */
export const usage = daemonUsage();

/** How the daemon logs (see createLogger). */
export interface LoggingOptions {
  level: LogLevel;
  /** Undefined: pretty when stderr is a terminal, else JSON. */
  format?: "json" | "pretty";
}

/** Parsed command line: server options, or a request for help or the version. */
export type CliCommand =
  | { kind: "help" }
  | { kind: "version" }
  | {
      kind: "serve";
      options: SandboxServerOptions;
      logging: LoggingOptions;
      /** Whether to turn on the kernel's favordynmods cgroup option (see favorCgroupMoves). */
      favorCgroupMoves: boolean;
    };

/**
 * Parses the daemon's arguments, with `SANDBOXD_*` variables as fallbacks (the table in flags.ts).
 * Throws an Error with a one-line message for the user on a bad value.
 */
export function parseCommandLine(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): CliCommand {
  const flags = readDaemonFlags(argv, env);
  if (flags.help) return { kind: "help" };
  if (flags.version) return { kind: "version" };
  const level = flags.text("log-level") ?? "info";
  if (!(logLevels as readonly string[]).includes(level))
    throw new Error(`--log-level must be one of ${logLevels.join(", ")}, got ${JSON.stringify(level)}`);
  const format = flags.text("log-format");
  if (format !== undefined && format !== "json" && format !== "pretty")
    throw new Error(`--log-format must be json or pretty, got ${JSON.stringify(format)}`);
  const workspace = flags.list("workspace");
  return {
    kind: "serve",
    options: {
      host: flags.text("host") ?? defaultHost,
      port: integer(flags, "port", defaultPort, 0, 65535),
      workspaceRoots: workspace?.length ? workspace : [process.cwd()],
      outputCapacityBytes: integer(flags, "max-output-bytes", undefined, 1024),
      outputHeadBytes: integer(flags, "output-head-bytes", undefined, 0),
      maxProcesses: integer(flags, "max-processes", undefined, 1),
      maxRetainedBytes: integer(flags, "max-retained-bytes", undefined, 1024 * 1024),
      lingerMs: integer(flags, "linger-ms", undefined, 0),
      ...securityOptions(flags, env),
      tls: tlsOptions(flags),
      logCommands: flags.enabled("log-commands"),
      metricsPublic: flags.enabled("metrics-public"),
      agentSandbox: agentSandboxOptions(flags),
    },
    logging: { level: level as LogLevel, format },
    favorCgroupMoves: !flags.enabled("no-favordynmods"),
  };
}

function integer(flags: DaemonFlagValues, name: string, fallback: number, min: number, max?: number): number;
function integer(
  flags: DaemonFlagValues,
  name: string,
  fallback: undefined,
  min: number,
  max?: number,
): number | undefined;
function integer(
  flags: DaemonFlagValues,
  name: string,
  fallback: number | undefined,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
) {
  return numberFlag(flags, name, min, max, "integer") ?? fallback;
}

function decimal(flags: DaemonFlagValues, name: string, min: number, max: number): number | undefined {
  return numberFlag(flags, name, min, max, "number");
}

/** A flag's number from `min` to `max` (an integer, or any finite number), undefined when it is not given; throws a one-line error otherwise. */
function numberFlag(
  flags: DaemonFlagValues,
  name: string,
  min: number,
  max: number,
  kind: "integer" | "number",
): number | undefined {
  const text = flags.text(name);
  if (text === undefined) return undefined;
  const value = Number(text);
  const valid = kind === "integer" ? Number.isInteger(value) : Number.isFinite(value);
  if (text.trim() === "" || !valid || value < min || value > max) {
    throw new Error(
      `--${name} must be ${kind === "integer" ? "an integer" : "a number"} from ${min} to ${max}, got ${JSON.stringify(text)}`,
    );
  }
  return value;
}

/** The security and reliability flags, parsed apart so the list above stays readable. */
function securityOptions(flags: DaemonFlagValues, env: NodeJS.ProcessEnv): SandboxServerOptions {
  const user = flags.text("user");
  const maxTasks = integer(flags, "max-tasks", undefined, 0);
  const maxTasksTotal = integer(flags, "max-tasks-total", undefined, 0);
  const commandsMemory = integer(flags, "commands-memory-bytes", undefined, 0);
  const commandsCpuWeight = decimal(flags, "commands-cpu-weight", 0, 16);
  const commandMemory = integer(flags, "command-memory-bytes", undefined, 0);
  const maxCommandMemory = integer(flags, "max-command-memory-bytes", undefined, 1024 * 1024);
  const maxCommandCpus = decimal(flags, "max-command-cpus", 0.01, 4096);
  const keepaliveMs = integer(flags, "keepalive-ms", undefined, 100);
  const tokenFile = flags.text("token-file");
  let token: string | undefined;
  try {
    // A flag beats a variable: --token, then --token-file (or SANDBOXD_TOKEN_FILE), then SANDBOXD_TOKEN.
    token = resolveToken({ token: flags.given("token"), tokenFile, env });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw new Error(`--token-file ${tokenFile}: no such file`);
    if (code === "EACCES") throw new Error(`--token-file ${tokenFile}: permission denied`);
    throw error;
  }
  return {
    token,
    insecure: flags.enabled("insecure"),
    runAs: user ? resolveUser(user) : undefined,
    allowSudo: flags.enabled("allow-sudo"),
    launcher:
      maxTasks === undefined &&
      maxTasksTotal === undefined &&
      commandsMemory === undefined &&
      commandsCpuWeight === undefined &&
      !flags.enabled("no-trace-tasks")
        ? undefined
        : Launcher.create({
            maxTasksPerCommand: maxTasks,
            maxTasksTotal,
            traceTasks: !flags.enabled("no-trace-tasks"),
            resources: { memoryBytes: commandsMemory, cpuWeight: commandsCpuWeight },
          }),
    commandLimits: {
      defaultMemoryBytes: commandMemory,
      maxMemoryBytes: maxCommandMemory,
      maxCpuMillis: maxCommandCpus === undefined ? undefined : Math.round(maxCommandCpus * 1000),
    },
    maxMessageBytes: integer(flags, "max-message-bytes", undefined, 1024),
    callLimits: {
      maxCalls: integer(flags, "max-calls", undefined, 1),
      maxCallsPerConnection: integer(flags, "max-calls-per-connection", undefined, 1),
    },
    keepalive: keepaliveMs === undefined ? undefined : { intervalMs: keepaliveMs, timeoutMs: keepaliveMs },
    listener: {
      maxConnections: integer(flags, "max-connections", undefined, 1),
      maxConnectionsPerPeer: integer(flags, "max-connections-per-peer", undefined, 0),
    },
    fileLimits: {
      maxTransfers: integer(flags, "max-transfers", undefined, 1),
      maxTransfersPerConnection: integer(flags, "max-transfers-per-connection", undefined, 1),
      maxWatchesPerConnection: integer(flags, "max-watches-per-connection", undefined, 0),
    },
    maxUnsizedReadBytes: integer(flags, "max-unsized-read-bytes", undefined, 0),
    stateDirectory: flags.text("state-dir"),
    corsOrigins: flags.list("cors-origin"),
  };
}

/** The KEP-539.2 listeners: `--agent-sandbox` for its layout, each port flag on its own or to move one. */
function agentSandboxOptions(flags: DaemonFlagValues): AgentSandboxOptions | undefined {
  const layout = flags.enabled("agent-sandbox");
  const grpcPort =
    integer(flags, "agent-sandbox-grpc-port", undefined, 0, 65535) ??
    (layout ? agentSandboxDefaultPorts.grpc : undefined);
  const restPort =
    integer(flags, "agent-sandbox-rest-port", undefined, 0, 65535) ??
    (layout ? agentSandboxDefaultPorts.rest : undefined);
  const metadataPrefix = flags.text("agent-sandbox-metadata-prefix");
  if (metadataPrefix === "")
    throw new Error("--agent-sandbox-metadata-prefix must not be empty: every variable of the daemon would be served");
  if (grpcPort === undefined && restPort === undefined) {
    if (flags.list("agent-sandbox-trusted-peer") !== undefined)
      throw new Error("--agent-sandbox-trusted-peer needs a KEP-539.2 port: --agent-sandbox or its port flags");
    return undefined;
  }
  if (grpcPort !== undefined && grpcPort !== 0 && grpcPort === restPort)
    throw new Error(`--agent-sandbox-grpc-port and --agent-sandbox-rest-port must differ, both are ${grpcPort}`);
  return { grpcPort, restPort, metadataPrefix, trustedPeers: flags.list("agent-sandbox-trusted-peer") };
}

/** The TLS flags: certificate, key and optional client CA, read from their files. */
function tlsOptions(flags: DaemonFlagValues): TlsOptions | undefined {
  const cert = flags.text("tls-cert");
  const key = flags.text("tls-key");
  const clientCa = flags.text("tls-client-ca");
  if (cert === undefined && key === undefined && clientCa === undefined) return undefined;
  if (cert === undefined || key === undefined) throw new Error("--tls-cert and --tls-key go together");
  return {
    cert: readFlagFile("tls-cert", cert),
    key: readFlagFile("tls-key", key),
    clientCa: clientCa === undefined ? undefined : readFlagFile("tls-client-ca", clientCa),
  };
}

/** Reads a file named by a flag, with an error that names the flag instead of a bare errno. */
function readFlagFile(flag: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new Error(
      `--${flag} ${file}: ${code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : (error as Error).message}`,
      { cause: error },
    );
  }
}
