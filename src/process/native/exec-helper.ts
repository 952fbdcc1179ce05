import { constants as osConstants } from "node:os";
import type { StartStage } from "../../shared/exit-cause.js";
import { executable, findNativeFile } from "./native-files.js";

/**
 * Finds `sandboxd-exec`, the small native program every command is started through (see
 * `native/sandboxd-exec.c`): it joins the command's cgroup, drops to the command's user, enters and
 * verifies its working directory and closes inherited fds, all with an environment the daemon
 * fixed, and only then execs the command with the environment the client asked for. Looked up in
 * `SANDBOXD_EXEC_HELPER`, then in `build/sandboxd-exec` of this package (built at install), searched
 * upwards from this module (see findNativeFile). Returns undefined
 * when it is missing or not executable.
 */
export function findExecHelper(environment: NodeJS.ProcessEnv = process.env): string | undefined {
  return findNativeFile("sandboxd-exec", environment.SANDBOXD_EXEC_HELPER, executable);
}

/** The prefix of the helper's variables that carry the command's environment, one `NAME=VALUE` each. */
const environmentPrefix = "SANDBOXD_ENV_";

/**
 * Encodes a command's environment for the helper: each variable becomes `SANDBOXD_ENV_<n>=NAME=VALUE`,
 * names no loader or libc reads, so nothing the client chose affects the helper, which may run as
 * root. The helper is spawned with exactly this environment.
 */
export function encodeHelperEnvironment(env: Readonly<Record<string, string>>): Record<string, string> {
  const encoded: Record<string, string> = {};
  let index = 0;
  for (const [name, value] of Object.entries(env)) encoded[`${environmentPrefix}${index++}`] = `${name}=${value}`;
  return encoded;
}

/** A step of the helper that failed, as it reports it on its status fd. */
export interface HelperFailure {
  /** "cgroup", "nproc", "groups", "setgid", "setuid", "tty", "cwd", "exec", "environment" or "usage". */
  stage: string;
  /** The errno name ("ENOENT"), or "EUNKNOWN". EXDEV at stage cwd: the directory changed under the check. */
  code: string;
  /** The OS's text for the errno. */
  message: string;
}

const errnoNames = new Map(Object.entries(osConstants.errno).map(([name, number]) => [number, name]));

/** Parses what the helper wrote on its status fd ("<stage> <errno>\n"); undefined when it wrote nothing. */
export function parseHelperStatus(text: string): HelperFailure | undefined {
  const match = /^(\w+) (\d+)\n?$/.exec(text);
  if (text === "") return undefined;
  if (match === null) return { stage: "exec", code: "EUNKNOWN", message: `unexpected status: ${JSON.stringify(text)}` };
  const errno = Number(match[2]);
  const code = errnoNames.get(errno) ?? "EUNKNOWN";
  return { stage: match[1], code, message: describeErrno(code) };
}

/**
 * The stage of a start a step of the helper belongs to: `cgroup`; `limits` for its task caps
 * (nproc, trace); `user` for the switch (groups, setgid, setuid, tty); `cwd`; `exec`; `spawn` for
 * the rest (its usage, its status fd, the command's environment).
 */
export function startStageOfHelperStep(step: string): StartStage {
  switch (step) {
    case "cgroup":
      return "cgroup";
    case "nproc":
    case "trace":
      return "limits";
    case "groups":
    case "setgid":
    case "setuid":
    case "tty":
      return "user";
    case "cwd":
      return "cwd";
    case "exec":
      return "exec";
    default:
      return "spawn";
  }
}

function describeErrno(code: string): string {
  switch (code) {
    case "ENOENT":
      return "no such file or directory";
    case "EACCES":
      return "permission denied";
    case "EPERM":
      return "operation not permitted";
    case "ENOTDIR":
      return "not a directory";
    case "EISDIR":
      return "is a directory";
    case "ENOEXEC":
      return "exec format error";
    case "EXDEV":
      return "changed while starting";
    default:
      return code;
  }
}
