import { realpath, stat } from "node:fs/promises";
import { statSync, type Stats } from "node:fs";
import path from "node:path";
import { ProcessError } from "./errors.js";

/**
 * Workspace confines working directories to a set of root directories. Roots are resolved with
 * realpath once; a requested cwd is resolved with realpath too, so `..` and symlinks pointing
 * out of every root are refused.
 */
export class Workspace {
  private constructor(readonly roots: readonly string[]) {}

  /** Resolves the roots (each must exist and be a directory); the first is the default cwd. */
  static async create(roots: readonly string[]): Promise<Workspace> {
    if (roots.length === 0) throw new Error("at least one workspace root is required");
    const resolved: string[] = [];
    for (const root of roots) {
      let real: string;
      try {
        real = await realpath(root);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        const why =
          code === "ENOENT"
            ? "does not exist"
            : code === "EACCES"
              ? "cannot be reached (permission denied)"
              : `cannot be resolved (${code ?? (error as Error).message})`;
        throw new Error(`workspace root ${root} ${why}`, { cause: error });
      }
      if (!(await stat(real)).isDirectory()) throw new Error(`workspace root is not a directory: ${root}`);
      resolved.push(real);
    }
    return new Workspace(resolved);
  }

  /** The default working directory: the first root. */
  get defaultDirectory(): string {
    return this.roots[0];
  }

  /**
   * Resolves a requested working directory. Relative paths start at the first root. Throws a
   * ProcessError: CWD_NOT_FOUND when it does not exist or is not a directory,
   * CWD_OUTSIDE_WORKSPACE when it resolves outside every root.
   */
  async resolve(cwd: string): Promise<string> {
    if (cwd === "") return this.defaultDirectory;
    const requested = path.resolve(this.defaultDirectory, cwd);
    let real: string;
    try {
      real = await realpath(requested);
    } catch (cause) {
      if (!this.contains(requested)) throw outside(cwd, this.roots);
      throw notFound(cwd, cause);
    }
    if (!this.contains(real)) throw outside(cwd, this.roots);
    // Gone again since the realpath: the same answer as not found before it.
    const found = await stat(real).catch((cause: unknown) => {
      throw notFound(cwd, cause);
    });
    if (!found.isDirectory()) {
      throw new ProcessError(`working directory is not a directory: ${cwd}`, "CWD_NOT_FOUND", {
        metadata: { cwd, errno: "ENOTDIR" },
      });
    }
    return real;
  }

  private contains(candidate: string): boolean {
    return this.roots.some(
      (root) => candidate === root || candidate.startsWith(root.endsWith("/") ? root : `${root}/`),
    );
  }
}

/** The refusal of a cwd outside every root; it names the roots (metadata `roots`, colon-separated), so the caller knows where to go. */
function outside(cwd: string, roots: readonly string[]): ProcessError {
  return new ProcessError(
    `working directory is outside the workspace roots: ${cwd} (allowed: ${roots.join(", ")})`,
    "CWD_OUTSIDE_WORKSPACE",
    {
      metadata: { cwd, roots: roots.join(":") },
    },
  );
}

/** CWD_NOT_FOUND for `cwd`, with the errno of the call that did not find it (ENOENT, ENOTDIR, ELOOP...). */
function notFound(cwd: string, cause: unknown): ProcessError {
  const errno = (cause as NodeJS.ErrnoException | undefined)?.code ?? "ENOENT";
  return new ProcessError(`working directory not found: ${cwd}`, "CWD_NOT_FOUND", { metadata: { cwd, errno }, cause });
}

/**
 * Says why `user` (with its primary and supplementary groups) could not work in one of `roots`, or
 * returns undefined: each directory on the way must grant it search (x), and the root itself read
 * and search (r, x), by the owner, group or other bits that apply to it. Root (uid 0) may enter
 * anything. A daemon started with `--user` checks this at start, so a workspace that user cannot
 * enter fails there, with the fix named, and not in every command afterwards.
 */
export function workspaceProblemFor(
  user: { name: string; uid: number; gid: number },
  groups: readonly number[],
  roots: readonly string[],
): string | undefined {
  if (user.uid === 0) return undefined;
  for (const root of roots) {
    const parts = path.resolve(root).split("/").filter(Boolean);
    for (let depth = 0; depth <= parts.length; depth++) {
      const directory = `/${parts.slice(0, depth).join("/")}`;
      let info: Stats;
      try {
        info = statSync(directory);
      } catch (error) {
        return `the workspace ${root} cannot be checked (${directory}: ${(error as NodeJS.ErrnoException).code ?? String(error)})`;
      }
      const isRoot = depth === parts.length;
      const needed = isRoot ? 0o5 : 0o1;
      const shift = info.uid === user.uid ? 6 : groups.includes(info.gid) ? 3 : 0;
      if (((info.mode >> shift) & needed) !== needed) {
        const what = isRoot ? "read and search (r-x)" : "search (x)";
        return `--user ${user.name} cannot enter the workspace ${root}: no ${what} permission on ${directory} (owner uid ${info.uid}, mode ${(info.mode & 0o777).toString(8)})`;
      }
    }
  }
  return undefined;
}
