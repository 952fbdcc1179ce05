import type { UserIdentity } from "../user.js";

/** The PATH of every command: the system's directories, as the official Node and Debian images set it. */
export const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * Builds the base environment of child processes: `PATH` ({@link defaultPath}) and `LANG=C.UTF-8`,
 * defined here and never read from the daemon's own environment, so how the daemon was started
 * (`npm start` puts `node_modules/.bin` and npm's helper directories first in PATH, a shell its own
 * variables) changes nothing a command sees. The variables naming the command's user come from
 * {@link identityEnvironment}; the request adds its own on top.
 */
export function createBaseEnvironment(): Record<string, string> {
  return { PATH: defaultPath, LANG: "C.UTF-8" };
}

/**
 * The variables naming the user a command runs as, from the password database: `HOME`, `USER`,
 * `LOGNAME`, and `SHELL` (the user's login shell, `/bin/sh` when unknown).
 */
export function identityEnvironment(identity: UserIdentity): Record<string, string> {
  return { HOME: identity.home, USER: identity.name, LOGNAME: identity.name, SHELL: identity.shell ?? "/bin/sh" };
}
