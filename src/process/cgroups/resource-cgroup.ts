import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { totalmem } from "node:os";
import path from "node:path";
import { removeCgroupQuietly, removeLeftoverCgroups } from "./cgroup-leftovers.js";
import { createDaemonCgroup } from "./cgroup-names.js";
import { ownCgroupDirectories } from "./pids-cgroup.js";

/** Options for {@link ResourceCgroup.detect}. */
export interface ResourceLimits {
  /** Memory all commands together may use, in bytes; 0 for no limit. Default {@link defaultCommandsMemoryBytes}. */
  memoryBytes?: number;
  /**
   * CPU weight of all commands together against the daemon's own, as a fraction of the default
   * weight (1024 shares on cgroup v1, 100 on v2). Default 0.5: under contention the daemon gets at
   * least two thirds of a core's time when it needs it.
   */
  cpuWeight?: number;
}

/**
 * Default memory of all commands together: what the machine (or the daemon's own memory cgroup)
 * has, less a reserve for the daemon of a tenth, at least 256 MiB.
 */
export function defaultCommandsMemoryBytes(): number {
  const available = availableMemoryBytes();
  return Math.max(64 * 1024 * 1024, available - Math.max(256 * 1024 * 1024, Math.floor(available / 10)));
}

/**
 * ResourceCgroup is the parent cgroup of all commands in the memory and cpu controllers: commands
 * together get a memory limit below the daemon's and a CPU weight below its own, so a memory hog is
 * killed by the kernel inside the commands' group rather than the daemon, and a CPU hog cannot starve
 * the daemon's event loop. On cgroup v1 each controller is a hierarchy of its own, with a
 * directory of this daemon's own in each (see `daemonCgroupName`); a command joins them as it joins its pids cgroup (see
 * `sandboxd-exec --cgroup`). Where no controller is writable (no root, a read-only /sys/fs/cgroup,
 * cgroup v2 without delegation) there is none, and commands share the daemon's memory and CPU.
 */
export class ResourceCgroup {
  private constructor(
    /** The `cgroup.procs` files a command writes its pid to, one per hierarchy. */
    readonly procsFiles: readonly string[],
    /** The directories and the limits written into each, to recreate them after {@link close}. */
    private readonly directories: ReadonlyMap<string, Record<string, string>>,
    /** What was applied, for the daemon's start line. */
    readonly applied: { memoryBytes?: number; cpuWeight?: number },
  ) {}

  /**
   * Creates the commands' parent in each writable cgroup v1 memory and cpu hierarchy; undefined
   * when neither is writable. (On cgroup v2 the controllers belong on the pids parent: not done yet.)
   */
  static detect(limits: ResourceLimits = {}): ResourceCgroup | undefined {
    const memoryBytes = limits.memoryBytes ?? defaultCommandsMemoryBytes();
    const cpuWeight = limits.cpuWeight ?? 0.5;
    const procsFiles: string[] = [];
    const directories = new Map<string, Record<string, string>>();
    const applied: { memoryBytes?: number; cpuWeight?: number } = {};
    const create = (controller: string, settings: Record<string, string>) => {
      for (const candidate of ownCgroupDirectories(controller)) {
        // v1 only: a hierarchy mounted with this controller and not the unified one.
        if (existsSync(path.join(candidate, "cgroup.controllers"))) continue;
        removeLeftoverCgroups(candidate);
        let directory: string;
        try {
          directory = createDaemonCgroup(candidate);
        } catch {
          continue;
        }
        try {
          for (const [file, value] of Object.entries(settings)) writeFileSync(path.join(directory, file), value);
          procsFiles.push(path.join(directory, "cgroup.procs"));
          directories.set(directory, settings);
          return true;
        } catch {
          removeCgroupQuietly(directory);
        }
      }
      return false;
    };
    if (memoryBytes > 0 && create("memory", { "memory.limit_in_bytes": String(memoryBytes) }))
      applied.memoryBytes = memoryBytes;
    if (cpuWeight > 0 && create("cpu", { "cpu.shares": String(Math.max(2, Math.round(1024 * cpuWeight))) }))
      applied.cpuWeight = cpuWeight;
    return procsFiles.length === 0 ? undefined : new ResourceCgroup(procsFiles, directories, applied);
  }

  /**
   * Recreates directories a {@link close} removed (a launcher may outlive one manager); called
   * before each command joins them. Throws when someone else created one of them meanwhile (it is
   * not adopted); other errors are left to the join, which reports them.
   */
  ensure(): void {
    for (const [directory, settings] of this.directories) {
      if (existsSync(directory)) continue;
      try {
        mkdirSync(directory);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "EEXIST")
          throw new Error(`cgroup ${directory} was created by another process meanwhile: not adopted`, {
            cause: error,
          });
        continue;
      }
      try {
        for (const [file, value] of Object.entries(settings)) writeFileSync(path.join(directory, file), value);
      } catch {
        // The join fails and says so.
      }
    }
  }

  /** Removes the directories once every command is gone; errors are ignored. */
  close(): void {
    for (const directory of this.directories.keys()) {
      try {
        rmdirSync(directory);
      } catch {
        // Still busy or already gone.
      }
    }
  }
}

/** The memory the daemon may use, in bytes: the machine's, or its own memory cgroup's limit when that is smaller. */
export function availableMemoryBytes(): number {
  return Math.min(totalmem(), ownMemoryLimit() ?? Number.MAX_SAFE_INTEGER);
}

/** The memory limit of this process's own cgroup (v1 or v2), or undefined when there is none. */
function ownMemoryLimit(): number | undefined {
  for (const directory of ownCgroupDirectories("memory")) {
    for (const file of ["memory.max", "memory.limit_in_bytes"]) {
      try {
        const value = Number(readFileSync(path.join(directory, file), "utf8").trim());
        // v1 reports "no limit" as a huge page-aligned number.
        if (Number.isFinite(value) && value > 0 && value < 2 ** 60) return value;
      } catch {
        // Not this version's file.
      }
    }
  }
  return undefined;
}
