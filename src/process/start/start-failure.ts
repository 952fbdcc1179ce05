import { ProcessError } from "../errors.js";
import type { StartFailure } from "../exit-cause.js";
import { HelperStartError } from "../spawn/index.js";

/**
 * Why a spawn failed, as a start failure: the helper's stage and errno when it reported one, `exec`
 * for the errors of an exec (ENOENT, EACCES...), `spawn` for the rest (no pipes, no terminal).
 */
export function spawnFailure(cause: unknown, file: string): StartFailure {
  const code = (cause as NodeJS.ErrnoException).code;
  const message =
    code === "ENOENT"
      ? `program not found: ${file}`
      : code === "EACCES"
        ? `permission denied: ${file}`
        : `could not start ${file}: ${(cause as Error).message}`;
  if (cause instanceof HelperStartError) return { stage: cause.startStage, errno: code, message };
  const execErrors = ["ENOENT", "EACCES", "ENOEXEC", "EISDIR", "ENOTDIR", "E2BIG", "ETXTBSY", "ELOOP", "EPERM"];
  return { stage: code !== undefined && execErrors.includes(code) ? "exec" : "spawn", errno: code, message };
}

/**
 * The refusal for a working directory the helper could not enter as the command's user, or
 * undefined when the helper failed at another step.
 */
export function workingDirectoryRefusal(failure: HelperStartError, cwd: string): ProcessError | undefined {
  if (failure.stage !== "cwd") return undefined;
  switch (failure.code) {
    case "ENOENT":
    case "ENOTDIR":
      return new ProcessError(`working directory not found: ${cwd}`, "CWD_NOT_FOUND", {
        metadata: { cwd, errno: failure.code },
        cause: failure,
      });
    case "EXDEV":
      // A component was swapped (for a symlink out, say) between the check and the chdir.
      return new ProcessError(
        `working directory changed while the command was starting: ${cwd}`,
        "CWD_OUTSIDE_WORKSPACE",
        { metadata: { cwd, errno: failure.code }, cause: failure },
      );
    case "EACCES":
      return new ProcessError(
        `working directory is not accessible to the command's user: ${cwd}`,
        "CWD_NOT_ACCESSIBLE",
        { metadata: { cwd, errno: failure.code }, cause: failure },
      );
    default:
      return new ProcessError(`cannot enter working directory ${cwd}: ${failure.message}`, "SPAWN_FAILED", {
        metadata: { cwd, errno: failure.code },
        cause: failure,
      });
  }
}
