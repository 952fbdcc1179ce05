import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { cgroupMembers, killTasks, removeCgroupQuietly, removeLeftoverCgroups } from "./cgroup-leftovers.js";
import { createDaemonCgroup } from "./cgroup-names.js";

/**
 * PidsCgroup is a directory of the cgroup `pids` controller (v2, or v1's pids hierarchy) that the
 * daemon owns; each command gets a child cgroup of its own with `pids.max` set, so a fork bomb
 * inside one command stops at that many tasks and starves nobody else.
 */
export class PidsCgroup {
  private next = 0;
  /** Empty child cgroups kept for reuse, with their pids.max. */
  private readonly free: Array<{ directory: string; maxTasks: number }> = [];
  /** pids.max of every child cgroup this made. */
  private readonly caps = new Map<string, number>();
  /** Whether {@link close} removed the daemon's directory (then {@link create} makes it again). */
  private closed = false;
  /** Tasks of dead daemons' cgroups killed by {@link detect} so far, in this process. */
  static leftoverTasksKilled = 0;

  private constructor(
    /** The daemon's own cgroup directory, parent of the per-command ones. */
    readonly directory: string,
    /** `pids.max` of {@link directory}: the tasks of all commands together; undefined for none. */
    readonly maxTasksTotal: number | undefined,
  ) {}

  /**
   * Finds a writable pids controller for this process (cgroup v2 first, then v1) and creates a
   * directory of this daemon's own under the daemon's cgroup in it (see `daemonCgroupName`: unique
   * per daemon instance, never one that is there already), with `pids.max` = `maxTasksTotal` (all
   * commands together) when given. Returns undefined when there is none
   * or it is not writable (an unprivileged daemon, a read-only /sys/fs/cgroup). Directories left by
   * a daemon that died are emptied (their tasks killed) and removed on the way. `v1Only` skips the
   * unified hierarchy.
   */
  static detect(maxTasksTotal?: number, options: { v1Only?: boolean } = {}): PidsCgroup | undefined {
    for (const candidate of ownCgroupDirectories("pids")) {
      // The unified hierarchy is taken by the commands' own cgroups (see ResourceCgroup): one directory per command there.
      if (options.v1Only && existsSync(path.join(candidate, "cgroup.controllers"))) continue;
      PidsCgroup.leftoverTasksKilled += removeLeftoverCgroups(candidate);
      let directory: string;
      try {
        directory = createDaemonCgroup(candidate);
      } catch {
        continue;
      }
      try {
        // cgroup v2: children get a pids.max only when the controller is delegated to them.
        if (existsSync(path.join(directory, "cgroup.subtree_control"))) {
          writeFileSync(path.join(directory, "cgroup.subtree_control"), "+pids");
        }
        // The daemon-wide cap: every command's tasks count here too (the controller is hierarchical).
        if (maxTasksTotal !== undefined && maxTasksTotal > 0)
          writeFileSync(path.join(directory, "pids.max"), String(maxTasksTotal));
        const probe = new PidsCgroup(directory, maxTasksTotal);
        const child = probe.create(1);
        rmdirSync(child.directory);
        probe.caps.delete(child.directory);
        return probe;
      } catch {
        removeCgroupQuietly(directory);
      }
    }
    return undefined;
  }

  /**
   * Creates a child cgroup allowing at most `maxTasks` tasks (processes and threads). A process joins
   * it by writing its pid (or "0" for itself) to `procsFile` before it forks.
   */
  create(maxTasks: number): { directory: string; procsFile: string } {
    // Recreated if a shutdown removed it (a launcher may outlive one manager); a directory someone
    // else made meanwhile under this name is not adopted: mkdir fails with EEXIST.
    // Only after a close: no filesystem probe per command otherwise.
    if (this.closed) {
      this.free.length = 0;
      mkdirSync(this.directory);
      this.closed = false;
      if (this.maxTasksTotal !== undefined && this.maxTasksTotal > 0)
        writeFileSync(path.join(this.directory, "pids.max"), String(this.maxTasksTotal));
    }
    // An empty cgroup of an earlier command, with the same cap: no mkdir, no pids.max write. Kept ones
    // are this daemon's alone (a sweep of leftovers never touches a live daemon's), until a close.
    const reused = this.free.pop();
    if (reused !== undefined && reused.maxTasks === maxTasks) {
      return { directory: reused.directory, procsFile: path.join(reused.directory, "cgroup.procs") };
    }
    if (reused !== undefined) removeCgroupQuietly(reused.directory);
    const directory = path.join(this.directory, `p${this.next++}`);
    mkdirSync(directory);
    try {
      writeFileSync(path.join(directory, "pids.max"), String(maxTasks));
    } catch (error) {
      rmdirSync(directory);
      throw error;
    }
    this.caps.set(directory, maxTasks);
    return { directory, procsFile: path.join(directory, "cgroup.procs") };
  }

  /**
   * Kills whatever is left in a child cgroup (tasks that escaped the process group with setsid) and,
   * once nothing is charged to it any more, keeps it for the next command (up to
   * {@link maxFreeCgroups}) or removes it. An empty `cgroup.procs` is not enough: a task that exited
   * counts in `pids.current` until its parent reaps it (orphans go to the daemon when it reaps them,
   * else to init), and a cgroup handed out with such zombies in it would make the next command's
   * forks fail. Retries briefly while the killed tasks exit and are reaped; a cgroup still charged
   * after about a second is removed rather than kept (the kernel lets an empty cgroup go while its
   * zombies are not yet reaped; they stay counted in the daemon's cgroup until they are), or left
   * where even that fails, never reused.
   */
  async remove(directory: string): Promise<void> {
    for (let attempt = 0; attempt < 50; attempt++) {
      // pids.current first: nothing charged means no task and no zombie, the usual case, in one read
      // (this runs once for every command that ends); only otherwise are the members listed.
      const drained = tasksCharged(directory) === 0;
      const members = drained ? [] : cgroupMembers(directory);
      if (members === undefined) return;
      if (members.length === 0) {
        const maxTasks = this.caps.get(directory);
        if (drained && maxTasks !== undefined && this.free.length < maxFreeCgroups) {
          this.free.push({ directory, maxTasks });
          return;
        }
        if (drained || attempt === 49) {
          try {
            rmdirSync(directory);
            this.caps.delete(directory);
            return;
          } catch {
            // Busy after all: try again.
          }
        }
      }
      killTasks(members);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    this.caps.delete(directory);
  }

  /** Removes the kept empty cgroups and the daemon's directory (once every child is gone); errors are ignored. */
  close(): void {
    for (const { directory } of this.free.splice(0)) {
      removeCgroupQuietly(directory);
      this.caps.delete(directory);
    }
    try {
      rmdirSync(this.directory);
      this.closed = true;
    } catch (error) {
      // Still busy (kept: the next create uses it as it is), or already gone (made again).
      if ((error as NodeJS.ErrnoException).code === "ENOENT") this.closed = true;
    }
  }
}

/** The tasks charged to a pids cgroup (`pids.current`: zombies not yet reaped included); -1 when unreadable. */
function tasksCharged(directory: string): number {
  try {
    return Number(readFileSync(path.join(directory, "pids.current"), "utf8"));
  } catch {
    return -1;
  }
}

/** Most empty per-command cgroups kept for reuse: a mkdir, a pids.max write and an rmdir saved per command. */
const maxFreeCgroups = 64;

/**
 * Directories of this process's own cgroup in each mounted hierarchy that has `controller` ("pids",
 * "memory", "cpu"), cgroup v2 first.
 */
export function ownCgroupDirectories(controller: string): string[] {
  let mounts: string;
  let own: string;
  try {
    mounts = readFileSync("/proc/self/mountinfo", "utf8");
    own = readFileSync("/proc/self/cgroup", "utf8");
  } catch {
    return [];
  }
  const ownPath = (match: (controllers: string) => boolean) => {
    for (const line of own.split("\n")) {
      const [, controllers, cgroupPath] = line.split(":");
      if (cgroupPath !== undefined && match(controllers)) return cgroupPath;
    }
    return undefined;
  };
  const found: string[] = [];
  for (const line of mounts.split("\n")) {
    const [before, after] = line.split(" - ");
    if (after === undefined) continue;
    const mountPoint = before.split(" ")[4];
    const [fsType, , superOptions = ""] = after.split(" ");
    if (fsType === "cgroup2") {
      const relative = ownPath((controllers) => controllers === "");
      try {
        if (
          relative !== undefined &&
          readFileSync(path.join(mountPoint, relative, "cgroup.controllers"), "utf8")
            .split(/\s+/)
            .includes(controller)
        ) {
          found.unshift(path.join(mountPoint, relative));
        }
      } catch {
        // Not readable: not usable.
      }
    } else if (fsType === "cgroup" && superOptions.split(",").includes(controller)) {
      const relative = ownPath((controllers) => controllers.split(",").includes(controller));
      if (relative !== undefined) found.push(path.join(mountPoint, relative));
    }
  }
  return found;
}
