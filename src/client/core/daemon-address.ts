import { SandboxError } from "./errors.js";

/**
 * The environment variable the TypeScript client, the `sandbox` CLI and the Python SDK read for the
 * daemon's base URL when none is given (`SANDBOXD_URL`, as E2B's SDKs read `E2B_API_KEY`).
 */
export const urlVariable = "SANDBOXD_URL";

/**
 * The environment variable they read for the bearer token when none is given: `SANDBOXD_TOKEN`,
 * the same variable the daemon reads its token from.
 */
export const tokenVariable = "SANDBOXD_TOKEN";

/** Where the daemon is when neither an option nor {@link urlVariable} says: the daemon's own default address. */
export const defaultBaseUrl = "http://127.0.0.1:7007";

/** What {@link resolveDaemonAddress} takes: the caller's options, and how to name them in a refusal. */
export interface DaemonAddressOptions {
  /** The base URL given, if any. */
  baseUrl?: string;
  /** The token given, if any (an empty string is none). */
  token?: string;
  /** Whether the caller allowed the token to go in clear to a host that is not loopback. */
  allowCleartextToken?: boolean;
  /** How the caller spells that permission, for the refusal's message (`allowCleartextToken: true`, `--allow-cleartext-token`). */
  allowCleartextTokenName?: string;
}

/** A checked daemon address: the base URL and the token to send, if any. */
export interface DaemonAddress {
  /** The base URL, `http://` or `https://`. */
  readonly baseUrl: string;
  /** The bearer token; undefined for none. */
  readonly token?: string;
}

/**
 * Resolves and checks where the daemon is and what token goes with it: the options first, then
 * {@link urlVariable} and {@link tokenVariable}, then {@link defaultBaseUrl} and no token. Throws
 * a SandboxError `INVALID_ARGUMENT` for a URL that is not `http://host:port` or
 * `https://host:port` (saying which the daemon speaks), and for a token that would go in clear
 * (`http://`) to a host that is not loopback unless the caller allowed it: anyone on the path
 * could read it and run commands with it.
 */
export function resolveDaemonAddress(
  options: DaemonAddressOptions,
  env: NodeJS.ProcessEnv = process.env,
): DaemonAddress {
  const baseUrl = nonEmpty(options.baseUrl) ?? nonEmpty(env[urlVariable]) ?? defaultBaseUrl;
  const url = parseDaemonUrl(baseUrl);
  const token = options.token !== undefined ? nonEmpty(options.token) : nonEmpty(env[tokenVariable]);
  if (token !== undefined) assertTokenMayGo(url, baseUrl, options);
  return token === undefined ? { baseUrl } : { baseUrl, token };
}

/**
 * Throws a SandboxError `INVALID_ARGUMENT` when a token would go in clear (`http://`) to a host that
 * is not loopback and `options.allowCleartextToken` does not allow it; `url` is `baseUrl` parsed.
 */
export function assertTokenMayGo(
  url: URL,
  baseUrl: string,
  options: Pick<DaemonAddressOptions, "allowCleartextToken" | "allowCleartextTokenName">,
): void {
  if (url.protocol !== "http:" || isLoopbackHost(url.hostname) || options.allowCleartextToken === true) return;
  throw new SandboxError(
    `refusing to send the token in clear to ${baseUrl}: use https:// (a daemon started with --tls-cert and --tls-key), ` +
      `or allow it with ${options.allowCleartextTokenName ?? "allowCleartextToken: true"} on a network you trust`,
    "INVALID_ARGUMENT",
  );
}

/** Parses a daemon URL; a SandboxError `INVALID_ARGUMENT` naming both forms when it is neither. */
export function parseDaemonUrl(baseUrl: string): URL {
  let url: URL | undefined;
  try {
    url = new URL(baseUrl);
  } catch {
    url = undefined;
  }
  // "127.0.0.1:7007" parses with the protocol "127.0.0.1:": a scheme is what it lacks.
  if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:") || url.hostname === "") {
    throw new SandboxError(`invalid daemon URL ${JSON.stringify(baseUrl)}: ${daemonUrlForms}`, "INVALID_ARGUMENT");
  }
  return url;
}

/** The two forms of a daemon URL, said the same way by every client. */
export const daemonUrlForms =
  "write it as http://host:port (the daemon speaks plain HTTP by default) or https://host:port (a daemon started with --tls-cert)";

/** Whether `hostname` (as `URL` gives it) is the loopback interface: localhost, 127.0.0.0/8 or ::1. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, "").toLowerCase();
  return host === "localhost" || host.endsWith(".localhost") || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * Explains a failure to reach the daemon whose cause shows the two ends disagree about TLS, or
 * returns undefined: `https://` to a daemon speaking plain HTTP fails in the TLS handshake
 * (OpenSSL's "wrong version number"), `http://` to a TLS daemon gets a reset or a malformed answer.
 */
export function tlsMismatch(baseUrl: string, error: unknown): string | undefined {
  const url = URL.canParse(baseUrl) ? new URL(baseUrl) : undefined;
  if (url === undefined) return undefined;
  const plain = `http://${url.host}`;
  for (let cause: unknown = error; cause instanceof Error; cause = cause.cause) {
    const code = (cause as NodeJS.ErrnoException).code ?? "";
    if (
      url.protocol === "https:" &&
      (code === "ERR_SSL_WRONG_VERSION_NUMBER" || /wrong version number|packet length too long/i.test(cause.message))
    ) {
      return `the daemon at ${baseUrl} speaks plain HTTP, not TLS: use ${plain}, or start the daemon with --tls-cert and --tls-key`;
    }
  }
  return undefined;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}
