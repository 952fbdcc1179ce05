import { readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { cgroupOwnerGone, visiblePidNamespaces } from "./cgroup-names.js";

/** The pids of a cgroup's tasks (its `cgroup.procs`); undefined when it is gone, empty when unreadable. */
export function cgroupMembers(directory: string): number[] | undefined {
  try {
    return readFileSync(path.join(directory, "cgroup.procs"), "utf8").split("\n").filter(Boolean).map(Number);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT" ? undefined : [];
  }
}

/** Sends SIGKILL to every task of a cgroup; tasks gone meanwhile are skipped. Returns how many were signalled. */
export function killCgroupMembers(directory: string): number {
  return killTasks(cgroupMembers(directory) ?? []);
}

/** Sends SIGKILL to each pid; ones gone meanwhile are skipped. Returns how many were signalled. */
export function killTasks(pids: readonly number[]): number {
  let killed = 0;
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
      killed++;
    } catch {
      // Gone meanwhile.
    }
  }
  return killed;
}

/** Thaws a cgroup a freezer (v1's `freezer.state`, v2's `cgroup.freeze`) may have left frozen; errors are ignored. */
function thawQuietly(directory: string): void {
  for (const [file, value] of [
    ["freezer.state", "THAWED"],
    ["cgroup.freeze", "0"],
  ] as const) {
    try {
      writeFileSync(path.join(directory, file), value);
    } catch {
      // No such freezer here, or gone.
    }
  }
}

/** Removes an empty cgroup directory; one still busy (or gone) is left as it is. */
export function removeCgroupQuietly(directory: string): void {
  try {
    rmdirSync(directory);
  } catch {
    // Busy or gone.
  }
}

/**
 * Kills the tasks of, and removes, the cgroups under `parent` that belong to sandboxd daemons
 * certainly no longer running (see {@link cgroupOwnerGone}: a daemon killed with SIGKILL leaves them,
 * its commands inside), with the per-command cgroups below them. Another live daemon's are never
 * touched, nor, from inside a pid namespace, those of a daemon of another. Returns how many tasks were sent SIGKILL.
 * The killed tasks take a moment to go: a directory that cannot be removed now is removed at a
 * later start.
 */
export function removeLeftoverCgroups(parent: string): number {
  let entries: string[];
  try {
    entries = readdirSync(parent);
  } catch {
    return 0;
  }
  let killed = 0;
  // Read once per sweep, and only when a name of another pid namespace asks for it.
  let namespaces: ReadonlySet<string> | undefined | null = null;
  const livePidNamespaces = () => {
    if (namespaces === null) namespaces = visiblePidNamespaces();
    return namespaces;
  };
  for (const entry of entries) {
    if (!cgroupOwnerGone(entry, livePidNamespaces)) continue;
    const directory = path.join(parent, entry);
    try {
      const children = readdirSync(directory, { withFileTypes: true }).filter((child) => child.isDirectory());
      killed += killCgroupMembers(directory);
      for (const child of children) killed += killCgroupMembers(path.join(directory, child.name));
      // A daemon that died during a tree kill may have left a command frozen: killed while still frozen
      // (nothing forks meanwhile), it dies as it is thawed.
      for (const child of children) thawQuietly(path.join(directory, child.name));
      for (const child of children) removeCgroupQuietly(path.join(directory, child.name));
      removeCgroupQuietly(directory);
    } catch {
      // Gone meanwhile.
    }
  }
  return killed;
}
