/** Variables of the daemon's own environment that children inherit; nothing else leaks. */
export const inheritedVariables: readonly string[] = [
  "PATH",
  "HOME",
  "USER",
  "LOGNAME",
  "SHELL",
  "LANG",
  "LANGUAGE",
  "LC_ALL",
  "LC_CTYPE",
  "TZ",
  "TMPDIR",
];

/**
 * Builds the clean base environment for child processes: the {@link inheritedVariables} of
 * `source` (the daemon's environment by default) and a default PATH when it has none. The
 * daemon's token, Node options and anything else are left out.
 */
export function createBaseEnvironment(source: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const base: Record<string, string> = {};
  for (const name of inheritedVariables) {
    const value = source[name];
    if (value !== undefined) base[name] = value;
  }
  base.PATH ??= "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  return base;
}
