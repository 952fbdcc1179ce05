import { parseArgs } from "node:util";
import { readFileSync } from "node:fs";
import type { SandboxServerOptions, TlsOptions } from "../server/index.js";
import { Launcher, resolveUser } from "../process/index.js";
import { defaultHost, defaultPort, resolveToken } from "../server/index.js";
import { logLevels, type LogLevel } from "../server/observe.js";

/** The daemon's command-line help. */
export const usage = `sandboxd: run commands in this machine for clients far away (gRPC, Connect, gRPC-Web)

usage: sandboxd [options]

  --host <address>          address to listen on (SANDBOXD_HOST, default ${defaultHost})
  --port <port>             port to listen on, 0 for any (SANDBOXD_PORT, default ${defaultPort})
  --workspace <dir>         workspace root, repeatable; the first is the default cwd
                            (SANDBOXD_WORKSPACE, colon-separated; default: the current directory)
  --max-output-bytes <n>    output retained per process (SANDBOXD_MAX_OUTPUT_BYTES, default 8 MiB)
  --max-retained-bytes <n>  output all exited records keep together; the oldest is dropped past it
                            (SANDBOXD_MAX_RETAINED_BYTES, default 256 MiB)
  --max-processes <n>       live processes allowed (SANDBOXD_MAX_PROCESSES, default 1024)
  --linger-ms <n>           how long exited records stay readable (SANDBOXD_LINGER_MS, default 60000)
  --token <token>           bearer token required on every call but health (SANDBOXD_TOKEN)
  --token-file <file>       read the token from a file of mode 0600 (SANDBOXD_TOKEN_FILE)
  --insecure                allow a non-loopback --host without a token
  --user <name|uid>         run commands as this user, with its groups, HOME, USER, LOGNAME (SANDBOXD_USER)
  --allow-sudo              let requests with sudo run as root (the daemon must be root)
  --max-tasks <n>           tasks (processes, threads) one command may have, 0 for no cap
                            (SANDBOXD_MAX_TASKS, default 1024)
  --max-tasks-total <n>     tasks of all commands together, 0 for no cap (SANDBOXD_MAX_TASKS_TOTAL,
                            default a quarter of the kernel's pid_max, at most 16384)
  --commands-memory-bytes <n>
                            memory of all commands together, 0 for no limit (SANDBOXD_COMMANDS_MEMORY_BYTES,
                            default the machine's less a tenth, at least 256 MiB, kept for the daemon)
  --max-message-bytes <n>   largest request message (SANDBOXD_MAX_MESSAGE_BYTES, default 4 MiB)
  --max-calls <n>           calls in progress on the daemon (SANDBOXD_MAX_CALLS, default 4096)
  --max-calls-per-connection <n>
                            calls in progress on one connection (default 256)
  --max-connections <n>     connections open at once, every protocol (SANDBOXD_MAX_CONNECTIONS, default 1024)
  --keepalive-ms <n>        ping interval that finds dead peers (SANDBOXD_KEEPALIVE_MS, default 30000)
  --state-dir <dir>         record process groups here; leftovers of a killed daemon are killed
                            at the next start (SANDBOXD_STATE_DIR)
  --cors-origin <origin>    let browser pages of this origin call the daemon (Connect, gRPC-Web); repeatable,
                            * for any (SANDBOXD_CORS_ORIGINS, comma-separated)
  --tls-cert <file>         serve TLS with this PEM certificate chain; needs --tls-key (SANDBOXD_TLS_CERT)
  --tls-key <file>          the PEM private key of --tls-cert (SANDBOXD_TLS_KEY)
  --tls-client-ca <file>    require client certificates signed by these PEM CAs (mutual TLS)
                            (SANDBOXD_TLS_CLIENT_CA)
  --log-level <level>       trace, debug, info, warn, error, fatal or silent (SANDBOXD_LOG_LEVEL, default info)
  --log-format <format>     json or pretty (SANDBOXD_LOG_FORMAT; default pretty on a terminal, else json)
  --log-commands            put command lines in the process audit (they may carry secrets)
  --metrics-public          serve GET /metrics without the token
  -h, --help                show this help
`;

/** How the daemon logs (see createLogger). */
export interface LoggingOptions {
  level: LogLevel;
  /** Undefined: pretty when stderr is a terminal, else JSON. */
  format?: "json" | "pretty";
}

/** Parsed command line: server options, or a request for help. */
export type CliCommand = { help: true } | { help: false; options: SandboxServerOptions; logging: LoggingOptions };

/**
 * Parses the daemon's arguments, with environment variables as fallbacks. Throws an Error with a
 * message for the user on a bad value.
 */
export function parseCommandLine(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): CliCommand {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      host: { type: "string" },
      port: { type: "string" },
      workspace: { type: "string", multiple: true },
      "max-output-bytes": { type: "string" },
      "max-processes": { type: "string" },
      "max-retained-bytes": { type: "string" },
      "linger-ms": { type: "string" },
      token: { type: "string" },
      "token-file": { type: "string" },
      insecure: { type: "boolean" },
      user: { type: "string" },
      "allow-sudo": { type: "boolean" },
      "max-tasks": { type: "string" },
      "max-tasks-total": { type: "string" },
      "commands-memory-bytes": { type: "string" },
      "max-message-bytes": { type: "string" },
      "max-calls": { type: "string" },
      "max-calls-per-connection": { type: "string" },
      "keepalive-ms": { type: "string" },
      "max-connections": { type: "string" },
      "state-dir": { type: "string" },
      "cors-origin": { type: "string", multiple: true },
      "tls-cert": { type: "string" },
      "tls-key": { type: "string" },
      "tls-client-ca": { type: "string" },
      "log-level": { type: "string" },
      "log-format": { type: "string" },
      "log-commands": { type: "boolean" },
      "metrics-public": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) return { help: true };
  const level = (values["log-level"] as string | undefined) ?? env.SANDBOXD_LOG_LEVEL ?? "info";
  if (!(logLevels as readonly string[]).includes(level)) throw new Error(`--log-level must be one of ${logLevels.join(", ")}, got ${JSON.stringify(level)}`);
  const format = (values["log-format"] as string | undefined) ?? env.SANDBOXD_LOG_FORMAT;
  if (format !== undefined && format !== "json" && format !== "pretty") throw new Error(`--log-format must be json or pretty, got ${JSON.stringify(format)}`);
  const workspace = values.workspace ?? env.SANDBOXD_WORKSPACE?.split(":").filter(Boolean);
  return {
    help: false,
    options: {
      host: values.host ?? env.SANDBOXD_HOST ?? defaultHost,
      port: integer("port", values.port ?? env.SANDBOXD_PORT, defaultPort, 0, 65535),
      workspaceRoots: workspace?.length ? workspace : [process.cwd()],
      outputCapacityBytes: integer("max-output-bytes", values["max-output-bytes"] ?? env.SANDBOXD_MAX_OUTPUT_BYTES, undefined, 1024),
      maxProcesses: integer("max-processes", values["max-processes"] ?? env.SANDBOXD_MAX_PROCESSES, undefined, 1),
      maxRetainedBytes: integer("max-retained-bytes", values["max-retained-bytes"] ?? env.SANDBOXD_MAX_RETAINED_BYTES, undefined, 0),
      lingerMs: integer("linger-ms", values["linger-ms"] ?? env.SANDBOXD_LINGER_MS, undefined, 0),
      ...securityOptions(values, env),
      tls: tlsOptions(values, env),
      logCommands: values["log-commands"] === true,
      metricsPublic: values["metrics-public"] === true,
    },
    logging: { level: level as LogLevel, format },
  };
}

function integer(name: string, text: string | undefined, fallback: number, min: number, max?: number): number;
function integer(name: string, text: string | undefined, fallback: undefined, min: number, max?: number): number | undefined;
function integer(name: string, text: string | undefined, fallback: number | undefined, min: number, max = Number.MAX_SAFE_INTEGER) {
  if (text === undefined || text === "") return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`--${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(text)}`);
  }
  return value;
}

/** The security and reliability flags (issue 6), parsed apart so the list above stays readable. */
function securityOptions(values: Record<string, string | boolean | string[] | undefined>, env: NodeJS.ProcessEnv): SandboxServerOptions {
  const text = (name: string) => values[name] as string | undefined;
  const user = text("user") ?? env.SANDBOXD_USER;
  const maxTasks = integer("max-tasks", text("max-tasks") ?? env.SANDBOXD_MAX_TASKS, undefined, 0);
  const maxTasksTotal = integer("max-tasks-total", text("max-tasks-total") ?? env.SANDBOXD_MAX_TASKS_TOTAL, undefined, 0);
  const commandsMemory = integer("commands-memory-bytes", text("commands-memory-bytes") ?? env.SANDBOXD_COMMANDS_MEMORY_BYTES, undefined, 0);
  const keepaliveMs = integer("keepalive-ms", text("keepalive-ms") ?? env.SANDBOXD_KEEPALIVE_MS, undefined, 100);
  return {
    token: resolveToken({ token: text("token"), tokenFile: text("token-file") ?? env.SANDBOXD_TOKEN_FILE, env }),
    insecure: values.insecure === true,
    runAs: user ? resolveUser(user) : undefined,
    allowSudo: values["allow-sudo"] === true,
    launcher:
      maxTasks === undefined && maxTasksTotal === undefined && commandsMemory === undefined
        ? undefined
        : Launcher.create({ maxTasksPerCommand: maxTasks, maxTasksTotal, resources: { memoryBytes: commandsMemory } }),
    maxMessageBytes: integer("max-message-bytes", text("max-message-bytes") ?? env.SANDBOXD_MAX_MESSAGE_BYTES, undefined, 1024),
    callLimits: {
      maxCalls: integer("max-calls", text("max-calls") ?? env.SANDBOXD_MAX_CALLS, undefined, 1),
      maxCallsPerConnection: integer("max-calls-per-connection", text("max-calls-per-connection"), undefined, 1),
    },
    keepalive: keepaliveMs === undefined ? undefined : { intervalMs: keepaliveMs, timeoutMs: keepaliveMs },
    listener: { maxConnections: integer("max-connections", text("max-connections") ?? env.SANDBOXD_MAX_CONNECTIONS, undefined, 1) },
    stateDirectory: text("state-dir") ?? env.SANDBOXD_STATE_DIR,
    corsOrigins: (values["cors-origin"] as string[] | undefined) ?? env.SANDBOXD_CORS_ORIGINS?.split(",").map((origin) => origin.trim()).filter(Boolean),
  };
}

/** The TLS flags: certificate, key and optional client CA, read from their files. */
function tlsOptions(values: Record<string, string | boolean | string[] | undefined>, env: NodeJS.ProcessEnv): TlsOptions | undefined {
  const cert = (values["tls-cert"] as string | undefined) ?? env.SANDBOXD_TLS_CERT;
  const key = (values["tls-key"] as string | undefined) ?? env.SANDBOXD_TLS_KEY;
  const clientCa = (values["tls-client-ca"] as string | undefined) ?? env.SANDBOXD_TLS_CLIENT_CA;
  if (cert === undefined && key === undefined && clientCa === undefined) return undefined;
  if (cert === undefined || key === undefined) throw new Error("--tls-cert and --tls-key go together");
  return { cert: readFileSync(cert), key: readFileSync(key), clientCa: clientCa === undefined ? undefined : readFileSync(clientCa) };
}
