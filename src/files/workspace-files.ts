import { constants as fsConstants } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import path from "node:path";
import type { UserIdentity } from "../process/index.js";
import { errnoOf, FileError, fileErrorOf } from "./errors.js";
import type { FilesContext } from "./context.js";
import { TemporaryCommits } from "./temporaries.js";
import { createOwnerNames, fileStatOf, type FileStat } from "./file-stat.js";
import { createFileCalls, DT_DIR, DT_LNK, DT_UNKNOWN, O_PATH, type RawStat } from "./native-calls.js";
import { openFileReader, type FileReader, type ReadOptions } from "./read.js";
import { PathResolver, type Location, type WorkspaceRoot } from "./resolve.js";
import { openWatch, type FileWatch, type WatchOptions } from "./watch.js";
import { createFileWriter, type FileWriter, type WriteHeader } from "./write.js";

/** Default most bytes a read sends of a file without a size (a device, a /proc file): 64 MiB. */
export const defaultMaxUnsizedReadBytes = 64 * 1024 * 1024;
/** Default entries of one page of a listing. */
export const defaultEntriesPageSize = 1000;
/** Most entries of one page of a listing. */
export const maxEntriesPageSize = 10_000;
/** Deepest listing. */
export const maxListDepth = 64;
/** Default permission bits of a new directory. */
export const defaultDirectoryMode = 0o755;

/** Options for {@link WorkspaceFiles.create}. */
export interface WorkspaceFilesOptions {
  /** The workspace roots, real paths (the process manager's `Workspace.roots`); the first is the default. */
  workspaceRoots: readonly string[];
  /** The user whose rights every operation runs with (`--user`); the daemon's own when undefined. */
  user?: UserIdentity;
  /** Most bytes one read sends of a file without a size. Default {@link defaultMaxUnsizedReadBytes}. */
  maxUnsizedReadBytes?: number;
  /** Use Node's `fs` instead of the addon (tests of the fallback). */
  withoutAddon?: boolean;
  /** Resolve every path one component at a time, never with openat2 (tests of the fallback). */
  walkOnly?: boolean;
}

/** What {@link WorkspaceFiles.list} answers: one page. */
export interface ListPage {
  /** The entries, ordered by path. */
  entries: FileStat[];
  /** The path (relative to the listed directory) of the last entry when more follow; undefined on the last page. */
  continueAfter?: string;
}

/** Options of {@link WorkspaceFiles.list}. */
export interface ListOptions {
  /** Levels to descend: 1 for the directory's own entries. Default 1, at most {@link maxListDepth}. */
  depth?: number;
  /** Entries in the page. Default {@link defaultEntriesPageSize}, at most {@link maxEntriesPageSize}. */
  pageSize?: number;
  /** Continue after this entry (a `continueAfter` of the page before). */
  after?: string;
}

/**
 * WorkspaceFiles is the file domain: every operation of the file service on paths beneath the
 * workspace roots (see {@link PathResolver} for how a path is found without leaving them), with the
 * `--user` user's rights (see {@link createFileCalls}). Operations throw {@link FileError}s.
 */
export class WorkspaceFiles {
  private constructor(
    private readonly context: FilesContext,
    private readonly rootHandles: readonly FileHandle[],
  ) {}

  /** Opens the roots (held as O_PATH fds for the daemon's life) and resolves the identity. */
  static async create(options: WorkspaceFilesOptions): Promise<WorkspaceFiles> {
    const calls = createFileCalls({ user: options.user, withoutAddon: options.withoutAddon });
    const roots: WorkspaceRoot[] = [];
    const handles: FileHandle[] = [];
    for (const root of options.workspaceRoots) {
      // The daemon's own open: a root the user cannot enter still fails each lookup as the user.
      const handle = await open(root, O_PATH | fsConstants.O_DIRECTORY);
      roots.push({ path: root, fd: handle.fd });
      // The fd stays open for the daemon's life, closed by close(), not by the handle's collection.
      handles.push(handle);
    }
    const resolver = new PathResolver(roots, calls, { walkOnly: options.walkOnly });
    return new WorkspaceFiles(
      {
        resolver,
        calls,
        names: createOwnerNames(),
        maxUnsizedReadBytes: options.maxUnsizedReadBytes ?? defaultMaxUnsizedReadBytes,
        commits: new TemporaryCommits(),
      },
      handles,
    );
  }

  /** The workspace roots. */
  get roots(): readonly string[] {
    return this.context.resolver.roots.map((root) => root.path);
  }

  /** Whether Watch works here (the addon's inotify). */
  get canWatch(): boolean {
    return this.context.calls.canWatch;
  }

  /** Places a path beneath a root without looking it up (see {@link PathResolver.locate}). */
  locate(requested: string, field = "path"): Location {
    return this.context.resolver.locate(requested, field);
  }

  /** Describes an entry: itself, or with `followSymlinks` what a symlink there points to. */
  async stat(requested: string, options: { followSymlinks?: boolean } = {}): Promise<FileStat> {
    const { resolver, calls, names } = this.context;
    const location = resolver.locate(requested);
    if (options.followSymlinks || location.relative === "") {
      const fd = await resolver.open(location, O_PATH, true);
      try {
        return fileStatOf(location.display, await calls.stat(fd, ""), names);
      } catch (error) {
        throw fileErrorOf(error, requested);
      } finally {
        await calls.close(fd);
      }
    }
    const { dir, name } = await resolver.openParent(location);
    try {
      return await this.statAt(dir, name, location.display);
    } catch (error) {
      throw fileErrorOf(error, requested);
    } finally {
      await calls.close(dir);
    }
  }

  /** One page of the entries of a directory, ordered by path (a directory's entries right after it). */
  async list(requested: string, options: ListOptions = {}): Promise<ListPage> {
    const { resolver, calls } = this.context;
    const depth = Math.min(Math.max(options.depth ?? 1, 1), maxListDepth);
    const pageSize = Math.min(Math.max(options.pageSize ?? defaultEntriesPageSize, 1), maxEntriesPageSize);
    const location = resolver.locate(requested);
    const fd = await resolver.open(location, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY, true);
    const found: Listed[] = [];
    try {
      await this.collect(fd, location.display, "", depth, options.after?.split("/"), pageSize + 1, found);
    } catch (error) {
      throw fileErrorOf(error, requested);
    } finally {
      await calls.close(fd);
    }
    const more = found.length > pageSize;
    const page = found.slice(0, pageSize);
    return {
      // Every entry kept has its stat: those gone before it was taken were left out.
      entries: page.map((entry) => entry.stat!),
      continueAfter: more ? page[page.length - 1]?.relative : undefined,
    };
  }

  /**
   * Creates a directory with `mode` (exactly, no umask; {@link defaultDirectoryMode} by default).
   * With `parents`, missing parents are created too (with the same mode) and an existing directory is
   * no error. Resolves with its stat and whether this call created it.
   */
  async makeDirectory(
    requested: string,
    options: { parents?: boolean; mode?: number } = {},
  ): Promise<{ stat: FileStat; created: boolean }> {
    const location = this.context.resolver.locate(requested);
    const mode = checkMode(options.mode ?? defaultDirectoryMode);
    if (this.context.resolver.isRoot(location)) {
      if (!options.parents)
        throw new FileError(`already exists: ${requested}`, "PATH_ALREADY_EXISTS", { metadata: { path: requested } });
      return { stat: await this.stat(requested), created: false };
    }
    const created = await this.makeDirectoryAt(location, options.parents ?? false, mode);
    return { stat: await this.stat(requested, { followSymlinks: true }), created };
  }

  /** Deletes a file, a symlink or a directory (with everything in it when `recursive`). */
  async remove(requested: string, options: { recursive?: boolean } = {}): Promise<void> {
    const { resolver, calls } = this.context;
    const location = resolver.locate(requested);
    if (resolver.isRoot(location)) throw workspaceRoot(requested);
    const { dir, name } = await resolver.openParent(location);
    try {
      const kind = (await calls.stat(dir, name)).mode & fsConstants.S_IFMT;
      if (kind !== fsConstants.S_IFDIR) await calls.unlink(dir, name, false);
      else if (options.recursive) await this.removeTree(dir, name);
      else await calls.unlink(dir, name, true);
    } catch (error) {
      throw fileErrorOf(error, requested);
    } finally {
      await calls.close(dir);
    }
  }

  /** Renames an entry, atomically; an existing destination is replaced only with `overwrite`. */
  async move(source: string, destination: string, options: { overwrite?: boolean } = {}): Promise<FileStat> {
    const { resolver, calls } = this.context;
    const from = resolver.locate(source, "source");
    const to = resolver.locate(destination, "destination");
    if (resolver.isRoot(from)) throw workspaceRoot(source);
    if (resolver.isRoot(to)) throw workspaceRoot(destination);
    const fromParent = await resolver.openParent(from);
    try {
      const toParent = await resolver.openParent(to);
      try {
        await calls
          .rename(fromParent.dir, fromParent.name, toParent.dir, toParent.name, !options.overwrite)
          .catch((error: unknown) => {
            switch (errnoOf(error)) {
              case "EXDEV":
                throw new FileError(`cannot move across filesystems: ${source} to ${destination}`, "CROSS_DEVICE", {
                  metadata: { source, destination },
                  cause: error,
                });
              case "EINVAL":
                throw new FileError(
                  `cannot move a directory into itself: ${source} to ${destination}`,
                  "INVALID_ARGUMENT",
                  { metadata: { field: "destination" }, cause: error },
                );
              case "EEXIST":
              case "ENOTEMPTY":
              case "EISDIR":
                throw fileErrorOf(error, destination);
              default:
                throw fileErrorOf(error, source);
            }
          });
        return await this.statAt(toParent.dir, toParent.name, to.display).catch((error: unknown) => {
          throw fileErrorOf(error, destination);
        });
      } finally {
        await calls.close(toParent.dir);
      }
    } finally {
      await calls.close(fromParent.dir);
    }
  }

  /** Sets the permission bits of a file or directory (a symlink's target, inside the workspace). */
  async chmod(requested: string, mode: number): Promise<FileStat> {
    const { resolver, calls, names } = this.context;
    checkMode(mode);
    const location = resolver.locate(requested);
    const fd = await resolver.open(location, O_PATH, true);
    try {
      await calls.chmod(fd, mode);
      return fileStatOf(location.display, await calls.stat(fd, ""), names);
    } catch (error) {
      throw fileErrorOf(error, requested);
    } finally {
      await calls.close(fd);
    }
  }

  /** Opens a file for a streamed read (see {@link FileReader}); throws before any byte is read. */
  openRead(requested: string, options: ReadOptions = {}): Promise<FileReader> {
    return openFileReader(this.context, requested, options);
  }

  /**
   * Prepares a write (see {@link FileWriter}): checks the target and its parent and creates the
   * temporary file, so a refusal comes before any byte is taken.
   */
  createWriter(header: WriteHeader): Promise<FileWriter> {
    return createFileWriter(this.context, header, (location, mode) => this.makeDirectoryAt(location, true, mode));
  }

  /** Starts watching a directory (see {@link FileWatch}). */
  watch(requested: string, options: WatchOptions = {}): Promise<FileWatch> {
    return openWatch(this.context, requested, options);
  }

  /** Lets go of the roots' fds. */
  async close(): Promise<void> {
    for (const handle of this.rootHandles) await handle.close();
  }

  private async statAt(dir: number, name: string, display: string): Promise<FileStat> {
    const { calls, names } = this.context;
    const raw = await calls.stat(dir, name);
    const target =
      (raw.mode & fsConstants.S_IFMT) === fsConstants.S_IFLNK
        ? await calls.readlink(dir, name).catch(() => undefined)
        : undefined;
    return fileStatOf(display, raw, names, target);
  }

  /** mkdir (-p with `parents`) of a location; resolves with whether it created the last one. */
  private async makeDirectoryAt(location: Location, parents: boolean, mode: number): Promise<boolean> {
    const { resolver, calls } = this.context;
    if (resolver.isRoot(location)) return false;
    let parent: { dir: number; name: string };
    try {
      parent = await resolver.openParent(location);
    } catch (error) {
      if (!parents || !(error instanceof FileError) || error.reason !== "PATH_NOT_FOUND") throw error;
      const above = path.posix.dirname(location.relative);
      await this.makeDirectoryAt(
        { ...location, relative: above === "." ? "" : above, display: path.posix.dirname(location.display) },
        true,
        mode,
      );
      parent = await resolver.openParent(location);
    }
    try {
      await calls.mkdir(parent.dir, parent.name, mode);
    } catch (error) {
      await calls.close(parent.dir);
      if (parents && errnoOf(error) === "EEXIST") {
        // An existing directory (or a symlink to one inside the workspace) is what -p wants.
        const fd = await resolver.open(location, O_PATH | fsConstants.O_DIRECTORY, true).catch(() => undefined);
        if (fd !== undefined) {
          await calls.close(fd);
          return false;
        }
      }
      throw fileErrorOf(error, location.requested);
    }
    try {
      // mkdir's mode went through the umask: the requested bits, exactly.
      const fd = await calls.openAt(parent.dir, parent.name, O_PATH | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW);
      try {
        await calls.chmod(fd, mode);
      } finally {
        await calls.close(fd);
      }
      return true;
    } catch (error) {
      throw fileErrorOf(error, location.requested);
    } finally {
      await calls.close(parent.dir);
    }
  }

  /** rm -r of `name` in `dir`, never following a symlink; entries removed meanwhile are no error. */
  private async removeTree(dir: number, name: string): Promise<void> {
    const { calls } = this.context;
    let fd: number;
    try {
      fd = await calls.openAt(dir, name, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW);
    } catch (error) {
      const errno = errnoOf(error);
      if (errno === "ENOENT") return;
      // Replaced by a file or a symlink meanwhile: that is what goes.
      if (errno === "ENOTDIR" || errno === "ELOOP") return ignoreGone(calls.unlink(dir, name, false));
      throw error;
    }
    try {
      for (;;) {
        const { names, types } = await calls.readdir(fd);
        if (names.length === 0) break;
        await inBatches(names.length, 32, async (index) => {
          const child = names[index];
          let type = types[index];
          if (type === DT_UNKNOWN) type = directoryType(await calls.stat(fd, child).catch(() => undefined));
          if (type === DT_DIR) await this.removeTree(fd, child);
          else await ignoreGone(calls.unlink(fd, child, false));
        });
      }
    } finally {
      await calls.close(fd);
    }
    await ignoreGone(calls.unlink(dir, name, true));
  }

  /** Walks `dirFd` depth first in name order, appending what comes after `after` to `found` up to `limit`. */
  private async collect(
    dirFd: number,
    display: string,
    relative: string,
    depth: number,
    after: string[] | undefined,
    limit: number,
    found: Listed[],
  ): Promise<void> {
    const { calls, names: owners } = this.context;
    const listing = await calls.readdir(dirFd);
    // Name order by UTF-16 code units, as `<` compares, sorted without a callback per comparison; a
    // type is looked up only for a walk that descends.
    const names = listing.names.slice().sort();
    const typeOf = depth > 1 ? new Map(listing.names.map((name, index) => [name, listing.types[index]])) : undefined;
    const mine: Listed[] = [];
    let added = 0;
    const flushStats = async () => {
      const stats = await calls.statEntries(
        dirFd,
        mine.map((entry) => entry.name),
      );
      mine.forEach((entry, index) => {
        const raw = stats[index];
        if (raw === null) entry.gone = true;
        else entry.stat = fileStatOf(entry.display, raw, owners, undefined, entry.name);
      });
    };
    for (const name of names) {
      if (found.length >= limit) break;
      if (after !== undefined && name < after[0]) continue;
      const resumesHere = after !== undefined && name === after[0];
      const childRelative = relative === "" ? name : `${relative}/${name}`;
      const childDisplay = `${display === "/" ? "" : display}/${name}`;
      if (!resumesHere) {
        const entry: Listed = { name, relative: childRelative, display: childDisplay, stat: undefined, gone: false };
        found.push(entry);
        mine.push(entry);
        added++;
      }
      if (depth <= 1) continue;
      let type = typeOf!.get(name);
      if (type === DT_UNKNOWN) type = directoryType(await calls.stat(dirFd, name).catch(() => undefined));
      if (type !== DT_DIR) continue;
      // A subdirectory the user may not read is listed, not descended into.
      const child = await calls
        .openAt(dirFd, name, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW)
        .catch(() => undefined);
      if (child === undefined) continue;
      try {
        await this.collect(
          child,
          childDisplay,
          childRelative,
          depth - 1,
          resumesHere && after.length > 1 ? after.slice(1) : undefined,
          limit,
          found,
        );
      } finally {
        await calls.close(child);
      }
    }
    if (added > 0) await flushStats();
    // Entries gone between the listing and their stat are left out.
    for (let index = found.length - 1; index >= 0; index--) if (found[index].gone) found.splice(index, 1);
  }
}

/** An entry of a listing in the making. */
interface Listed {
  /** Its name in its directory. */
  name: string;
  /** Its path from the listed directory. */
  relative: string;
  /** Its path as shown (from the workspace root). */
  display: string;
  /** Its stat, once taken (with the rest of its directory's entries). */
  stat: FileStat | undefined;
  /** Whether it was gone when its stat was taken. */
  gone: boolean;
}

function directoryType(raw: RawStat | undefined): number {
  if (raw === undefined) return DT_UNKNOWN;
  const kind = raw.mode & fsConstants.S_IFMT;
  return kind === fsConstants.S_IFDIR ? DT_DIR : kind === fsConstants.S_IFLNK ? DT_LNK : DT_UNKNOWN;
}

function checkMode(mode: number): number {
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777)
    throw new FileError(`mode must be at most 07777, got ${mode}`, "INVALID_ARGUMENT", { metadata: { field: "mode" } });
  return mode;
}

function workspaceRoot(requested: string): FileError {
  return new FileError(`a workspace root cannot be removed or moved: ${requested}`, "WORKSPACE_ROOT", {
    metadata: { path: requested },
  });
}

async function ignoreGone(operation: Promise<void>): Promise<void> {
  try {
    await operation;
  } catch (error) {
    if (errnoOf(error) !== "ENOENT") throw error;
  }
}

/** Runs `task(index)` for 0..count-1, `width` at a time. */
async function inBatches(count: number, width: number, task: (index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(width, count) }, worker));
}
