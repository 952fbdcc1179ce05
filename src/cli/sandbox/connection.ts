import { readFileSync } from "node:fs";
import { Option, type Command } from "commander";
import { Sandbox, SandboxError } from "../../client/index.js";
import { CliError } from "./exit-codes.js";

/** Where the daemon is when neither --url nor SANDBOX_URL says: `sandboxd`'s own default address. */
export const defaultUrl = "http://127.0.0.1:7007";

/** The connection flags every command takes. */
export interface ConnectionFlags {
  /** The daemon's base URL (--url). */
  url?: string;
  /** A file holding the bearer token (--token-file). */
  tokenFile?: string;
}

/** Names of the connection options, as commander keys them. */
export const connectionOptionKeys = ["url", "tokenFile"] as const;

/**
 * Adds --url and --token-file to `command`. Both the program and each command take them, so they
 * may come before the command's name (`sandbox --url ... ps`) or after it; the environment variables
 * are read in {@link resolveConnection}, after both.
 */
export function addConnectionOptions(command: Command): Command {
  return command
    .addOption(new Option("--url <url>", `the daemon's base URL (or set SANDBOX_URL; default ${defaultUrl})`))
    .addOption(new Option("--token-file <file>", "read the bearer token from this file (or set SANDBOX_TOKEN)"));
}

/** The daemon's URL and token from the flags and the environment (flags first). Throws a CliError for a bad value. */
export function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv = process.env): { baseUrl: string; token?: string } {
  const baseUrl = flags.url ?? env.SANDBOX_URL ?? defaultUrl;
  let parsed: URL;
  try {
    parsed = new URL(baseUrl);
  } catch {
    throw new CliError(`invalid daemon URL ${JSON.stringify(baseUrl)}: write it as http://host:port or https://host:port`, { usage: true });
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new CliError(`invalid daemon URL ${JSON.stringify(baseUrl)}: only http:// and https:// are supported`, { usage: true });
  }
  if (flags.tokenFile !== undefined) return { baseUrl, token: readToken(flags.tokenFile) };
  const token = env.SANDBOX_TOKEN;
  return token === undefined || token === "" ? { baseUrl } : { baseUrl, token };
}

/** Reads a token file, without its trailing newline. */
function readToken(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new CliError(`cannot read the token file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { cause: error });
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
  const sandbox = new Sandbox({ baseUrl, token, sessionId: options.sessionId });
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
  if (!(error instanceof SandboxError)) return new CliError(`cannot connect to ${baseUrl}: ${(error as Error).message}`, { cause: error });
  switch (error.code) {
    case "UNAUTHENTICATED":
      return new CliError(
        sentToken
          ? `the daemon at ${baseUrl} refused the token: ${error.message}`
          : `the daemon at ${baseUrl} wants a token (--token-file or SANDBOX_TOKEN): ${error.message}`,
        { cause: error },
      );
    case "EXECUTION_TIMEOUT":
      return new CliError(`cannot connect to ${baseUrl}: no answer in time`, { cause: error });
    default:
      return new CliError(`cannot connect to ${baseUrl}: ${error.message}`, { cause: error });
  }
}
