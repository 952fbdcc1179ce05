/** Default prefix of the variables `GET /v1/metadata` serves, as KEP-539.2's reference daemon has it. */
export const defaultMetadataPrefix = "SANDBOX_";

/**
 * Parts of a variable name that mark a credential: such a variable is never served, whatever its
 * prefix. A second line of defence only: the orchestrator must not put credentials under the prefix.
 */
const credentialMarkers = [
  "TOKEN",
  "SECRET",
  "PASSWORD",
  "PASSWD",
  "CRED",
  "KEY",
  "AUTH",
  "BEARER",
  "PRIVATE",
  "CERT",
  "COOKIE",
];

/** Options for {@link metadataEnvironment}. */
export interface MetadataEnvironmentOptions {
  /** Only variables whose name starts with this are served; must not be empty. */
  prefix: string;
  /** The daemon's bearer token: no variable whose value holds it is served. */
  token?: string;
}

/**
 * The variables `GET /v1/metadata` serves (KEP-539.2): those of `env` whose name starts with the
 * prefix, less the daemon's own configuration (`SANDBOXD_*`, its token among them), any name that
 * looks like a credential, and any value that holds the token. Untrusted commands in the sandbox can
 * read the endpoint, so what it serves must be fit for them. Throws for an empty prefix (everything
 * would be served).
 */
export function metadataEnvironment(
  env: Readonly<Record<string, string | undefined>>,
  options: MetadataEnvironmentOptions,
): Record<string, string> {
  if (options.prefix === "")
    throw new Error("the metadata prefix must not be empty: every variable of the daemon would be served");
  const served: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || !name.startsWith(options.prefix) || name.startsWith("SANDBOXD_")) continue;
    const upper = name.toUpperCase();
    if (credentialMarkers.some((marker) => upper.includes(marker))) continue;
    if (options.token !== undefined && value.includes(options.token)) continue;
    served[name] = value;
  }
  return served;
}
