import { parseArgs } from "node:util";
import type { SandboxServerOptions } from "../server/index.js";
import { defaultHost, defaultPort } from "../server/index.js";

/** The daemon's command-line help. */
export const usage = `sandboxd: run commands in this machine for clients far away (gRPC, Connect, gRPC-Web)

usage: sandboxd [options]

  --host <address>          address to listen on (SANDBOXD_HOST, default ${defaultHost})
  --port <port>             port to listen on, 0 for any (SANDBOXD_PORT, default ${defaultPort})
  --workspace <dir>         workspace root, repeatable; the first is the default cwd
                            (SANDBOXD_WORKSPACE, colon-separated; default: the current directory)
  --max-output-bytes <n>    output retained per process (SANDBOXD_MAX_OUTPUT_BYTES, default 8 MiB)
  --max-processes <n>       live processes allowed (SANDBOXD_MAX_PROCESSES, default 1024)
  --linger-ms <n>           how long exited records stay readable (SANDBOXD_LINGER_MS, default 60000)
  -h, --help                show this help
`;

/** Parsed command line: server options, or a request for help. */
export type CliCommand = { help: true } | { help: false; options: SandboxServerOptions };

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
      "linger-ms": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) return { help: true };
  const workspace = values.workspace ?? env.SANDBOXD_WORKSPACE?.split(":").filter(Boolean);
  return {
    help: false,
    options: {
      host: values.host ?? env.SANDBOXD_HOST ?? defaultHost,
      port: integer("port", values.port ?? env.SANDBOXD_PORT, defaultPort, 0, 65535),
      workspaceRoots: workspace?.length ? workspace : [process.cwd()],
      outputCapacityBytes: integer("max-output-bytes", values["max-output-bytes"] ?? env.SANDBOXD_MAX_OUTPUT_BYTES, undefined, 1024),
      maxProcesses: integer("max-processes", values["max-processes"] ?? env.SANDBOXD_MAX_PROCESSES, undefined, 1),
      lingerMs: integer("linger-ms", values["linger-ms"] ?? env.SANDBOXD_LINGER_MS, undefined, 0),
    },
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
