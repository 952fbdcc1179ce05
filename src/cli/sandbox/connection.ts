import { readFileSync } from "node:fs";
import { Option, type Command } from "commander";
import {
  defaultBaseUrl,
  resolveDaemonAddress,
  Sandbox,
  SandboxError,
  tokenVariable,
  urlVariable,
} from "../../client/index.js";
import { CliError } from "./exit-codes.js";

/** Where the daemon is when neither --url nor SANDBOXD_URL says: `sandboxd`'s own default address. */
export const defaultUrl = defaultBaseUrl;

/** The connection flags every command takes. */
export interface ConnectionFlags {
  /** The daemon's base URL (--url). */
  url?: string;
  /** A file holding the bearer token (--token-file). */
  tokenFile?: string;
  /** Send the token over cleartext http:// to a host that is not loopback (--allow-cleartext-token). */
  allowCleartextToken?: boolean;
}

/** Names of the connection options, as commander keys them. */
export const connectionOptionKeys = ["url", "tokenFile", "allowCleartextToken"] as const;

/** The variables this CLI read before the clients shared one pair; still read, with a warning. */
const deprecatedVariables = { url: "SANDBOX_URL", token: "SANDBOX_TOKEN" } as const;

/**
 * Adds --url, --token-file and --allow-cleartext-token to `command`. Both the program and each
 * command take them, so they may come before the command's name (`sandbox --url ... ps`) or after
 * it; the environment variables are read in {@link resolveConnection}, after both.
 */
export function addConnectionOptions(command: Command): Command {
  return command
    .addOption(new Option("--url <url>", `the daemon's base URL (or set ${urlVariable}; default ${defaultUrl})`))
    .addOption(new Option("--token-file <file>", `read the bearer token from this file (or set ${tokenVariable})`))
    .addOption(
      new Option(
        "--allow-cleartext-token",
        "send the token over http:// to a host that is not loopback (use https:// instead where you can)",
      ),
    );
}

/**
 * The daemon's URL and token from the flags and the environment (flags first, then SANDBOXD_URL and
 * SANDBOXD_TOKEN, then the old SANDBOX_URL and SANDBOX_TOKEN with a warning on stderr). Throws a
 * CliError for a bad URL or a token that would go in clear to a host that is not loopback.
 */
export function resolveConnection(
  flags: ConnectionFlags,
  env: NodeJS.ProcessEnv = process.env,
): { baseUrl: string; token?: string } {
  const fallback = { ...env };
  for (const [kind, old] of Object.entries(deprecatedVariables)) {
    const current = kind === "url" ? urlVariable : tokenVariable;
    if ((env[current] ?? "") !== "" || (env[old] ?? "") === "") continue;
    process.stderr.write(
      `sandbox: warning: ${old} is deprecated: set ${current} instead (read by the CLI, the TypeScript and the Python clients)\n`,
    );
    fallback[current] = env[old];
  }
  try {
    return resolveDaemonAddress(
      {
        baseUrl: flags.url,
        token: flags.tokenFile !== undefined ? readToken(flags.tokenFile) : undefined,
        allowCleartextToken: flags.allowCleartextToken,
        allowCleartextTokenName: "--allow-cleartext-token",
      },
      fallback,
    );
  } catch (error) {
    if (error instanceof SandboxError) throw new CliError(error.message, { usage: true, cause: error });
    throw error;
  }
}

/** Reads a token file, without its trailing newline. */
function readToken(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new CliError(
      `cannot read the token file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
      { cause: error },
    );
  }
  const token = text.trim();
  if (token === "") throw new CliError(`the token file ${file} is empty`);
  return token;
}

/** What {@link openSandbox} needs beyond the connection flags. */
export interface OpenOptions {
  /** Session of the commands this invocation starts; a random one by default. */
  sessionId?: string;
}

/**
 * Connects to the daemon and checks that it answers and accepts the token (the client's connect
 * timeout applies). Failures become one clear CliError naming the URL. The client's default time
 * limit of waiting commands does not apply: exec runs through the raw Exec call and start asks
 * for no limit, each unless `--timeout` sets one.
 */
export async function openSandbox(flags: ConnectionFlags, options: OpenOptions = {}): Promise<Sandbox> {
  const { baseUrl, token } = resolveConnection(flags);
  // The token was resolved above (an unset one stays unset: "" is none to the client, not "read the variable").
  const sandbox = new Sandbox({
    baseUrl,
    token: token ?? "",
    sessionId: options.sessionId,
    allowCleartextToken: flags.allowCleartextToken,
  });
  try {
    await sandbox.start();
  } catch (error) {
    throw connectionFailure(error, baseUrl, token !== undefined);
  }
  return sandbox;
}

/**
 * Closes a sandbox without killing anything: background processes started by `sandbox start`
 * must outlive the invocation, and an exec's command has ended by then (or was killed by
 * cancelling its call).
 */
export async function closeSandbox(sandbox: Sandbox): Promise<void> {
  await sandbox.close({ killProcesses: false });
}

/** A failure to connect, as one line that says what to check. */
function connectionFailure(error: unknown, baseUrl: string, sentToken: boolean): CliError {
  if (!(error instanceof SandboxError))
    return new CliError(`cannot connect to ${baseUrl}: ${(error as Error).message}`, { cause: error });
  switch (error.code) {
    case "UNAUTHENTICATED":
      return new CliError(
        sentToken
          ? `the daemon at ${baseUrl} refused the token: ${error.message}`
          : `the daemon at ${baseUrl} wants a token (--token-file or ${tokenVariable}): ${error.message}`,
        { cause: error },
      );
    case "EXECUTION_TIMEOUT":
      return new CliError(`cannot connect to ${baseUrl}: no answer in time`, { cause: error });
    default:
      return new CliError(`cannot connect to ${baseUrl}: ${error.message}`, { cause: error });
  }
}
