import { constants as fsConstants } from "node:fs";
import path from "node:path";
import { maxPathBytes } from "../shared/limits.js";
import { errnoOf, FileError, fileErrorOf } from "./errors.js";
import { O_PATH, RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS, type FileCalls } from "./native-calls.js";

/** A workspace root: its real path and an O_PATH fd on it that every lookup starts from. */
export interface WorkspaceRoot {
  /** The root's real path (symlinks resolved). */
  readonly path: string;
  /** An O_PATH directory fd of the root, held for the daemon's life. */
  readonly fd: number;
}

/** A requested path placed beneath a root, before anything is looked up. */
export interface Location {
  /** The path as the caller wrote it (for messages and error metadata). */
  readonly requested: string;
  /** The request field it came from (`path`, `source`, `destination`). */
  readonly field: string;
  /** The root it starts from. */
  readonly root: WorkspaceRoot;
  /** The path from the root, cleaned (`a/b/../c` is `a/c`); empty for the root itself. */
  readonly relative: string;
  /** Its absolute form, as answers show it. */
  readonly display: string;
}

/** Most symlinks one lookup follows, as the kernel's own limit (ELOOP past it). */
const maxSymlinks = 40;
/** Most times a walk starts again after a symlink was swapped under it. */
const maxRetries = 8;

/**
 * PathResolver finds files beneath the workspace roots without ever leaving them. A path is first
 * placed lexically ({@link locate}): relative to the first root, or absolute inside a root; `..`
 * cancels the component before it as written, and one that would climb above the root is refused.
 * Then it is looked up from the root's fd: by openat2 with RESOLVE_BENEATH and RESOLVE_NO_MAGICLINKS
 * where the kernel has it, which follows symlinks only while they stay beneath the root, atomically;
 * and otherwise (no addon, an old kernel, or a symlink openat2 will not follow: an absolute one) one
 * component at a time, each opened with O_NOFOLLOW in the directory before it, symlinks read and
 * resolved here by the same rules. A symlink swapped in while a lookup runs is either seen (and
 * judged) or not followed at all: nothing outside a root is ever opened.
 *
 * Mount points inside a root are crossed (RESOLVE_NO_XDEV is not used): a volume mounted in the
 * workspace is part of it, and only root could have mounted it.
 */
export class PathResolver {
  private openBeneathWorks: boolean;

  /** Creates a resolver over `roots` (the first is the default for relative paths). */
  constructor(
    readonly roots: readonly WorkspaceRoot[],
    private readonly calls: FileCalls,
    options: { walkOnly?: boolean } = {},
  ) {
    if (roots.length === 0) throw new Error("at least one workspace root is required");
    this.openBeneathWorks = calls.hasOpenBeneath && !options.walkOnly;
  }

  /**
   * Places `requested` beneath a root. Throws a FileError: INVALID_ARGUMENT (metadata `field`) for an
   * empty path, a NUL byte or more than 4096 bytes; PATH_OUTSIDE_WORKSPACE for an absolute path in no
   * root or a `..` that climbs above the root.
   */
  locate(requested: string, field = "path"): Location {
    if (requested === "") throw new FileError(`${field} is empty`, "INVALID_ARGUMENT", { metadata: { field } });
    if (requested.includes("\0"))
      throw new FileError(`${field} holds a NUL byte`, "INVALID_ARGUMENT", { metadata: { field } });
    if (Buffer.byteLength(requested) > maxPathBytes) {
      throw new FileError(`${field} is longer than ${maxPathBytes} bytes`, "INVALID_ARGUMENT", { metadata: { field } });
    }
    let cleaned = path.posix.normalize(requested);
    if (cleaned.length > 1 && cleaned.endsWith("/")) cleaned = cleaned.slice(0, -1);
    let root: WorkspaceRoot | undefined;
    let relative: string;
    if (cleaned.startsWith("/")) {
      root = this.rootContaining(cleaned);
      if (root === undefined) throw outside(requested, field);
      relative = cleaned.slice(root.path.length).replace(/^\/+/, "");
    } else {
      if (cleaned === ".." || cleaned.startsWith("../")) throw outside(requested, field);
      root = this.roots[0];
      relative = cleaned === "." ? "" : cleaned;
    }
    return {
      requested,
      field,
      root,
      relative,
      display: relative === "" ? root.path : path.posix.join(root.path, relative),
    };
  }

  /** Whether the location names a workspace root itself (one of several roots included). */
  isRoot(location: Location): boolean {
    return location.relative === "" || this.roots.some((root) => root.path === location.display);
  }

  /**
   * Opens what `location` names with `flags` (O_PATH for a handle only), following symlinks beneath
   * the roots, the last one too when `follow`, else opening it as itself (with O_PATH) or failing
   * with SYMLINK_LOOP. Resolves with an fd the caller closes; throws a FileError.
   */
  async open(location: Location, flags: number, follow: boolean): Promise<number> {
    if (this.openBeneathWorks) {
      try {
        return await this.calls.openBeneath(
          location.root.fd,
          location.relative || ".",
          flags | (follow ? 0 : fsConstants.O_NOFOLLOW),
          RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        );
      } catch (error) {
        const errno = errnoOf(error);
        // ENOSYS: an old kernel. EXDEV: an escape, or an absolute symlink openat2 does not follow
        // beneath the root: the walk tells them apart. EAGAIN: a rename raced a `..`.
        if (errno === "ENOSYS") this.openBeneathWorks = false;
        else if (errno !== "EXDEV" && errno !== "EAGAIN") throw fileErrorOf(error, location.requested);
      }
    }
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.walk(location, flags, follow);
      } catch (error) {
        // A symlink replaced by something else between the walk's open and its readlink: look again.
        if (!(error instanceof Swapped) || attempt >= maxRetries)
          throw fileErrorOf(error instanceof Swapped ? error.cause : error, location.requested);
      }
    }
  }

  /**
   * Opens the directory that holds what `location` names (an O_PATH fd, symlinks followed beneath
   * the roots) and returns it with the last component's name, for calls that act on a name in a
   * directory (create, remove, rename, lstat) without following it. Throws a FileError; WORKSPACE_ROOT
   * for a root, which has no directory of its own here.
   */
  async openParent(location: Location): Promise<{ dir: number; name: string }> {
    if (location.relative === "")
      throw new FileError(`the workspace root itself: ${location.requested}`, "WORKSPACE_ROOT", {
        metadata: { path: location.requested },
      });
    const parent = path.posix.dirname(location.relative);
    const dir = await this.open(
      { ...location, relative: parent === "." ? "" : parent },
      O_PATH | fsConstants.O_DIRECTORY,
      true,
    );
    return { dir, name: path.posix.basename(location.relative) };
  }

  /** The root an absolute, cleaned path lies in: the deepest one, when roots nest. */
  private rootContaining(absolute: string): WorkspaceRoot | undefined {
    let found: WorkspaceRoot | undefined;
    for (const root of this.roots) {
      const inside = absolute === root.path || root.path === "/" || absolute.startsWith(`${root.path}/`);
      if (inside && (found === undefined || root.path.length > found.path.length)) found = root;
    }
    return found;
  }

  /**
   * The lookup one component at a time (see the class). Each step holds an O_PATH fd of what it
   * found, so the file finally opened (through /proc/self/fd, for the permission check of a real
   * open) is the one that was judged, whatever is renamed meanwhile.
   */
  private async walk(location: Location, flags: number, follow: boolean): Promise<number> {
    const { calls } = this;
    let root = location.root;
    // The directories from the root down to the current one; all but the root's are ours to close.
    const stack: number[] = [root.fd];
    const pending = components(location.relative);
    let symlinks = 0;
    const unwind = async () => {
      while (stack.length > 1) await calls.close(stack.pop()!);
    };
    try {
      while (pending.length > 0) {
        const name = pending.shift()!;
        if (name === "..") {
          if (stack.length === 1) throw outside(location.requested, location.field);
          await calls.close(stack.pop()!);
          continue;
        }
        const last = pending.length === 0;
        const here = stack[stack.length - 1];
        const fd = await calls.openAt(here, name, O_PATH | fsConstants.O_NOFOLLOW);
        const kind =
          (
            await calls.stat(fd, "").catch(async (error: unknown) => {
              await calls.close(fd);
              throw error;
            })
          ).mode & fsConstants.S_IFMT;
        if (kind === fsConstants.S_IFLNK && (!last || follow)) {
          await calls.close(fd);
          if (++symlinks > maxSymlinks) throw Object.assign(new Error("too many symlinks"), { code: "ELOOP" });
          const target = await calls.readlink(here, name).catch((error: unknown) => {
            throw new Swapped("symlink replaced during the lookup", { cause: error });
          });
          if (target.startsWith("/")) {
            const cleaned = path.posix.normalize(target);
            const next = this.rootContaining(cleaned);
            if (next === undefined) throw outside(location.requested, location.field);
            await unwind();
            root = next;
            stack[0] = root.fd;
            pending.unshift(...components(cleaned.slice(root.path.length)));
          } else {
            pending.unshift(...components(target));
          }
          continue;
        }
        if (!last && kind !== fsConstants.S_IFDIR) {
          await calls.close(fd);
          throw Object.assign(new Error("not a directory"), { code: "ENOTDIR" });
        }
        stack.push(fd);
      }
      const final = stack[stack.length - 1];
      if (stack.length === 1) return await calls.openAt(final, ".", flags);
      if ((flags & O_PATH) !== 0) {
        if (
          (flags & fsConstants.O_DIRECTORY) !== 0 &&
          ((await calls.stat(final, "")).mode & fsConstants.S_IFMT) !== fsConstants.S_IFDIR
        ) {
          throw Object.assign(new Error("not a directory"), { code: "ENOTDIR" });
        }
        stack.pop();
        return final;
      }
      // Only a last component not to follow can still be a symlink: as openat2 with O_NOFOLLOW.
      if (((await calls.stat(final, "")).mode & fsConstants.S_IFMT) === fsConstants.S_IFLNK)
        throw Object.assign(new Error("a symlink"), { code: "ELOOP" });
      return await calls.reopen(final, flags);
    } finally {
      await unwind();
    }
  }
}

/** A symlink was replaced by something else while the walk read it. */
class Swapped extends Error {}

/** The components of a relative path, `.` and empty ones left out. */
function components(relative: string): string[] {
  return relative.split("/").filter((part) => part !== "" && part !== ".");
}

function outside(requested: string, field: string): FileError {
  const metadata: Record<string, string> = field === "path" ? { path: requested } : { path: requested, field };
  return new FileError(`${field} is outside the workspace roots: ${requested}`, "PATH_OUTSIDE_WORKSPACE", { metadata });
}
