import { accessSync, constants as fsConstants, statSync } from "node:fs";
import path from "node:path";

/**
 * Finds why `file` cannot be run, as a shell would report it (with the errno execve would give), or
 * undefined when it can. Synchronous
 * on purpose: a few stat calls on cached directories take microseconds, while each round trip through
 * the libuv thread pool cost about a millisecond under load, which doubled the start time of an
 * argv-form command.
 */
export function findProgramProblem(
  file: string,
  searchPath: string,
  cwd: string,
): { message: string; exitCode: number; errno: string } | undefined {
  const candidates = file.includes("/")
    ? [path.resolve(cwd, file)]
    : searchPath.split(":").map((dir) => path.resolve(cwd, dir || ".", file));
  let sawUnexecutable = false;
  for (const candidate of candidates) {
    try {
      const found = statSync(candidate, { throwIfNoEntry: false });
      // A path naming a directory is found but cannot run, as a shell says (126); a PATH entry is skipped.
      if (found?.isDirectory() && file.includes("/"))
        return { message: `is a directory: ${file}`, exitCode: 126, errno: "EACCES" };
      if (!found?.isFile()) continue;
      accessSync(candidate, fsConstants.X_OK);
      return undefined;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EACCES") sawUnexecutable = true;
    }
  }
  if (sawUnexecutable) return { message: `permission denied: ${file}`, exitCode: 126, errno: "EACCES" };
  return { message: `program not found: ${file}`, exitCode: 127, errno: "ENOENT" };
}
