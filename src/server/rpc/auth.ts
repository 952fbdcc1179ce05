import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync, realpathSync, statSync } from "node:fs";
import path from "node:path";
import { isIP } from "node:net";
import type { Interceptor } from "@connectrpc/connect";
import { sandboxError } from "./errors.js";

/** Services that answer without a token: the gRPC health check, for load balancers and probes. */
export const publicServices: readonly string[] = ["grpc.health.v1.Health"];

/** Options for {@link createAuthInterceptor}. */
export interface AuthOptions {
  /** The bearer token every call must carry in `authorization: Bearer <token>`. */
  token: string;
  /** Fully qualified service names callable without a token. Default {@link publicServices}. */
  publicServices?: readonly string[];
}

/**
 * Creates a server interceptor that refuses every call, streams included, whose `authorization`
 * header does not carry the bearer token, with UNAUTHENTICATED. Tokens are compared in constant
 * time (SHA-256 of both, then `timingSafeEqual`), so neither content nor length leaks through
 * timing. The token never appears in an error message or a log line.
 */
export function createAuthInterceptor(options: AuthOptions): Interceptor {
  const matches = createTokenCheck(options.token);
  const open = new Set(options.publicServices ?? publicServices);
  return (next) => async (request) => {
    if (open.has(request.service.typeName)) return next(request);
    const header = request.header.get("authorization");
    if (header === null) throw sandboxError("UNAUTHENTICATED", "missing bearer token");
    if (!matches(header)) throw sandboxError("UNAUTHENTICATED", "invalid bearer token");
    return next(request);
  };
}

/**
 * Creates a check of an `authorization` header value against `token`: true for `Bearer <token>`
 * (scheme case-insensitive). Compares SHA-256 digests with `timingSafeEqual`, so neither the
 * token's content nor its length leaks through timing. Throws for an empty token.
 */
export function createTokenCheck(token: string): (header: string | null | undefined) => boolean {
  if (token === "") throw new Error("the token must not be empty");
  const expected = digest(token);
  return (header) => {
    if (typeof header !== "string") return false;
    const match = /^bearer\s+(.*)$/is.exec(header.trim());
    return match !== null && timingSafeEqual(digest(match[1]), expected);
  };
}

function digest(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

/** Where {@link resolveToken} may find the token. */
export interface TokenSources {
  /** The token itself (`--token`). */
  token?: string;
  /** A file holding the token (`--token-file`); must not be readable or writable by group or others. */
  tokenFile?: string;
  /** The environment; `SANDBOXD_TOKEN` is read from it. Default `process.env`. */
  env?: NodeJS.ProcessEnv;
}

/**
 * Finds the daemon's token: `token`, else `tokenFile`, else `SANDBOXD_TOKEN`; undefined when none is
 * set. A token file open to group or others (any mode bit in 0o077) is refused, as ssh refuses a
 * private key, and so is an empty token; a file inside systemd's `$CREDENTIALS_DIRECTORY` (LoadCredential=)
 * is exempt, since systemd keeps that directory private to the service and gives a non-root service
 * user read access through an ACL that shows as group bits. Surrounding whitespace (a trailing newline) is trimmed.
 * Errors never include the token.
 */
export function resolveToken(sources: TokenSources): string | undefined {
  let token: string | undefined;
  if (sources.token !== undefined) token = sources.token;
  else if (sources.tokenFile !== undefined)
    token = readTokenFile(sources.tokenFile, (sources.env ?? process.env).CREDENTIALS_DIRECTORY);
  else token = (sources.env ?? process.env).SANDBOXD_TOKEN;
  if (token === undefined) return undefined;
  token = token.trim();
  if (token === "") throw new Error("the token is empty");
  return token;
}

function readTokenFile(file: string, credentialsDirectory: string | undefined): string {
  const mode = statSync(file).mode & 0o777;
  if ((mode & 0o077) !== 0 && !insideDirectory(file, credentialsDirectory)) {
    throw new Error(
      `token file ${file} has mode ${mode.toString(8).padStart(4, "0")}: it must be 0600 or stricter (chmod 600 ${file})`,
    );
  }
  return readFileSync(file, "utf8");
}

/** Whether `file` resolves (symlinks followed) to a path inside `directory`. */
function insideDirectory(file: string, directory: string | undefined): boolean {
  if (directory === undefined || directory === "") return false;
  try {
    const root = realpathSync(directory);
    return realpathSync(file).startsWith(`${root}${path.sep}`);
  } catch {
    return false;
  }
}

/** Whether `host` is a loopback address or name (127.0.0.0/8, ::1, localhost). */
export function isLoopbackHost(host: string): boolean {
  const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  if (bare === "localhost" || bare === "::1") return true;
  if (isIP(bare) === 4) return bare.startsWith("127.");
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
  return mapped !== null && mapped[1].startsWith("127.");
}

/**
 * Refuses to serve a non-loopback address without a token unless `insecure` is set: a daemon that
 * runs any command it is told to must not be open to the network by accident. Throws an Error.
 */
export function assertSafeBinding(options: { host: string; token?: string; insecure?: boolean }): void {
  if (options.token !== undefined || options.insecure || isLoopbackHost(options.host)) return;
  throw new Error(
    `refusing to listen on ${options.host} without a token: set --token, --token-file or SANDBOXD_TOKEN, or pass --insecure`,
  );
}

/**
 * Refuses `--user` and `--allow-sudo` without a token: commands then run as a user other than the
 * daemon's, and without a token any of them could call the daemon back over loopback and act as a
 * client (start processes as root with sudo, list, read, write and kill every other process), so
 * the user switch would confine nothing. Throws an Error that says so.
 */
export function assertSafeUserSwitch(options: { token?: string; runAs?: { name: string }; allowSudo?: boolean }): void {
  if (options.token !== undefined || (options.runAs === undefined && !options.allowSudo)) return;
  const flag = options.runAs !== undefined ? `--user ${options.runAs.name}` : "--allow-sudo";
  throw new Error(
    `refusing ${flag} without a token: any command could call the daemon back over loopback and act as a client ` +
      "(start sudo processes, read, write or kill every other process); set --token-file or SANDBOXD_TOKEN",
  );
}

/**
 * Refuses `--cors-origin *` without a token: every web page a user of this machine opens could then
 * call the daemon over loopback from its scripts and run commands. An origin named one by one stays
 * allowed: its pages are ones the operator chose to trust. Throws an Error that says so.
 */
export function assertSafeCors(options: { token?: string; corsOrigins?: readonly string[] }): void {
  if (options.token !== undefined || !(options.corsOrigins ?? []).includes("*")) return;
  throw new Error(
    "refusing --cors-origin * without a token: any web page opened on this machine could run commands through the daemon; " +
      "name the origins that may call it, or set --token-file or SANDBOXD_TOKEN",
  );
}
