import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { totalmem } from "node:os";
import path from "node:path";
import { removeCgroupQuietly, removeLeftoverCgroups } from "./cgroup-leftovers.js";
import { createDaemonCgroup } from "./cgroup-names.js";
import { ownCgroupDirectories } from "./pids-cgroup.js";
import {
  type CommandCgroupPlan,
  type CommandLimits,
  readCpuTimes,
  readCurrentMemory,
  readIoBytes,
  readOomKills,
  readPeakMemory,
} from "./command-cgroup.js";

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

/** A hierarchy commands get cgroups in: the unified (v2) one, or a v1 one named by its controller. */
type HierarchyKind = "unified" | "memory" | "cpu" | "cpuacct" | "freezer";

/** One hierarchy the daemon made its directory in, and what each command gets there. */
interface Hierarchy {
  readonly kind: HierarchyKind;
  /** The daemon's own directory, parent of the commands'. */
  readonly directory: string;
  /** The daemon-wide settings written into {@link directory}, to recreate it after a close. */
  readonly settings: Readonly<Record<string, string>>;
  /** The controllers that apply to commands here (for the unified hierarchy: those enabled below the daemon's directory). */
  readonly controllers: ReadonlySet<string>;
  /** Whether the kernel has the optional files: `memory.swap.max`/`memory.memsw.limit_in_bytes`, `memory.peak`, `cgroup.kill`. */
  readonly swapLimit: boolean;
  readonly peakFile: boolean;
  readonly killFile: boolean;
  /**
   * Whether it has a freezer, for a tree kill without `cgroup.kill`: cgroup v2's `cgroup.freeze`
   * (Linux 5.2+), or the cgroup v1 freezer hierarchy's `freezer.state`.
   */
  readonly freezeFile: boolean;
}

/** What the daemon can do with commands' cgroups on this machine, for its start line and for refusals. */
export interface CgroupCapabilities {
  /** A command's memory can be limited on its own (its own memory cgroup). */
  readonly memoryLimit: boolean;
  /** A command's CPU can be limited on its own (its own cpu cgroup). */
  readonly cpuLimit: boolean;
  /** Its CPU times are read from its own cgroup. */
  readonly cpuUsage: boolean;
  /** Its peak memory and its kills for memory are read from its own cgroup. */
  readonly memoryUsage: boolean;
  /** Its block I/O bytes are read from its own cgroup. */
  readonly ioUsage: boolean;
  /** Its tasks are capped in the unified hierarchy here (cgroup v2 pids), not by a pids cgroup of its own elsewhere. */
  readonly tasksLimit: boolean;
  /**
   * How its whole tree is killed: at once with the kernel's `cgroup.kill`; else frozen (cgroup v2's
   * `cgroup.freeze` or the v1 freezer, so nothing forks meanwhile), its members killed, thawed; else
   * a sweep of its members.
   */
  readonly treeKill: "cgroup.kill" | "freeze" | "sweep";
}

/**
 * ResourceCgroup is the parent of all commands in the memory and cpu controllers (and, for what
 * they use, cpuacct and the unified hierarchy), and makes each command cgroups of its own
 * under it ({@link planCommand}). The parent holds the daemon-wide limits: commands together get
 * a memory limit below the daemon's and a CPU weight below its own, so a memory hog is killed by the
 * kernel inside the commands' group rather than the daemon, and a CPU hog cannot starve the
 * daemon's event loop. Each command's own cgroups hold its own limits (so one command cannot push
 * another out past its limit) and are where its usage is read, its out-of-memory kills counted, and
 * its whole tree killed.
 *
 * On cgroup v1 each controller is a hierarchy of its own, with a directory of this daemon's own in
 * each (see `daemonCgroupName`); in the unified (v2) hierarchy one directory carries every
 * controller enabled there, and even without any (a v1 machine that mounts cgroup2 too) it gives
 * CPU times and `cgroup.kill`. A command joins its cgroups as it joins its pids cgroup (see
 * `sandboxd-exec --cgroup`). Where nothing is writable (no root, a read-only /sys/fs/cgroup, cgroup
 * v2 without delegation) there is none, commands share the daemon's memory and CPU, and their usage
 * is unknown.
 */
export class ResourceCgroup {
  private next = 0;
  /** Whether {@link close} removed the directories (then {@link ensure} recreates them). */
  private closed = false;

  private constructor(
    private readonly hierarchies: readonly Hierarchy[],
    /** What was applied, for the daemon's start line. */
    readonly applied: { memoryBytes?: number; cpuWeight?: number },
    /** What per-command limits and usage this machine allows. */
    readonly capabilities: CgroupCapabilities,
  ) {}

  /** Whether commands get a directory of their own in the unified (v2) hierarchy. */
  get unified(): boolean {
    return this.hierarchies.some((hierarchy) => hierarchy.kind === "unified");
  }

  /** The daemon's `cgroup.procs` files, one per hierarchy (each command's own are below them). */
  get procsFiles(): readonly string[] {
    return this.hierarchies.map((hierarchy) => path.join(hierarchy.directory, "cgroup.procs"));
  }

  /**
   * Creates the commands' parent in each writable hierarchy: the unified one (with the memory, cpu,
   * io and, when `pids` says so, pids controllers enabled below it where they are available), and
   * the cgroup v1 memory, cpu, cpuacct and freezer ones for what the unified one lacks. Undefined when
   * none is writable. `pids`: whether to take the pids controller of the unified hierarchy, with
   * `maxTasksTotal` as the daemon-wide cap (then no separate pids cgroup is made there).
   */
  static detect(limits: ResourceLimits = {}, pids?: { maxTasksTotal?: number }): ResourceCgroup | undefined {
    const memoryBytes = limits.memoryBytes ?? defaultCommandsMemoryBytes();
    const cpuWeight = limits.cpuWeight ?? 0.5;
    const hierarchies: Hierarchy[] = [];
    const applied: { memoryBytes?: number; cpuWeight?: number } = {};
    const unified = createUnified(memoryBytes, cpuWeight, pids);
    if (unified !== undefined) {
      hierarchies.push(unified);
      if (unified.controllers.has("memory") && memoryBytes > 0) applied.memoryBytes = memoryBytes;
      if (unified.controllers.has("cpu") && cpuWeight > 0) applied.cpuWeight = cpuWeight;
    }
    const has = (controller: string) => unified?.controllers.has(controller) ?? false;
    const v1 = (kind: Exclude<HierarchyKind, "unified">, settings: Record<string, string>) => {
      const created = createV1(kind, settings);
      if (created !== undefined) hierarchies.push(created);
      return created !== undefined;
    };
    // A tree kill without cgroup.kill freezes first: the v1 freezer where the unified hierarchy has
    // neither. Made (and its leftovers swept) before the other hierarchies, so that a command a dead
    // daemon left frozen is killed and thawed before their leftovers are swept.
    if (!(unified?.killFile || unified?.freezeFile)) v1("freezer", {});
    if (!has("memory")) {
      const settings: Record<string, string> = memoryBytes > 0 ? { "memory.limit_in_bytes": String(memoryBytes) } : {};
      if (v1("memory", settings) && memoryBytes > 0) applied.memoryBytes = memoryBytes;
    }
    if (!has("cpu")) {
      const settings: Record<string, string> =
        cpuWeight > 0 ? { "cpu.shares": String(Math.max(2, Math.round(1024 * cpuWeight))) } : {};
      if (v1("cpu", settings) && cpuWeight > 0) applied.cpuWeight = cpuWeight;
    }
    // CPU times: every unified cgroup has them (cpu.stat), a v1 machine has cpuacct (often with cpu).
    const cpuHierarchy = hierarchies.find((hierarchy) => hierarchy.kind === "cpu");
    if (unified === undefined && !(cpuHierarchy?.controllers.has("cpuacct") ?? false)) v1("cpuacct", {});
    // No v1 blkio: its counters see only I/O that passes its throttling, so they read 0 on machines
    // where the command did read and write (a guess, never reported); the unified io.stat is exact.
    if (hierarchies.length === 0) return undefined;
    const of = (kind: HierarchyKind) => hierarchies.find((hierarchy) => hierarchy.kind === kind);
    const memory = unified?.controllers.has("memory") ? unified : of("memory");
    const cpu = unified?.controllers.has("cpu") ? unified : of("cpu");
    const capabilities: CgroupCapabilities = {
      memoryLimit: memory !== undefined,
      cpuLimit: cpu !== undefined,
      cpuUsage:
        unified !== undefined || of("cpuacct") !== undefined || (cpuHierarchy?.controllers.has("cpuacct") ?? false),
      memoryUsage: memory !== undefined,
      ioUsage: has("io"),
      tasksLimit: has("pids"),
      treeKill: unified?.killFile
        ? "cgroup.kill"
        : unified?.freezeFile || of("freezer") !== undefined
          ? "freeze"
          : "sweep",
    };
    return new ResourceCgroup(hierarchies, applied, capabilities);
  }

  /**
   * Plans the cgroups of one command (see {@link CommandCgroupPlan}): a directory of its own in each
   * hierarchy, with `limits` written into it. A v1 cpu hierarchy is shared by commands without a CPU
   * limit of their own (its directory costs a mkdir per command for nothing else); every other is
   * the command's own.
   */
  planCommand(limits: CommandLimits): CommandCgroupPlan {
    const name = `c${this.next++}`;
    const directories: string[] = [];
    const writes: Array<readonly [string, string]> = [];
    const procsFiles: string[] = [];
    const usage: Array<CommandCgroupPlan["usage"][number]> = [];
    let killFile: string | undefined;
    let freezeFile: string | undefined;
    const unified = this.hierarchies.some((hierarchy) => hierarchy.kind === "unified");
    for (const hierarchy of this.hierarchies) {
      // Joined as text: the directories are normalized absolute paths, and path.join's normalizing
      // of the dozen paths a command's plan names was a twentieth of the garbage each exec left.
      const own = `${hierarchy.directory}/${name}`;
      const controllers = hierarchy.controllers;
      const cpuLimited = limits.cpuMillis !== undefined || limits.cpuWeight !== undefined;
      // Shared unless it limits this command's CPU or is where its CPU times are read.
      if (hierarchy.kind === "cpu" && !cpuLimited && (unified || !controllers.has("cpuacct"))) {
        procsFiles.push(`${hierarchy.directory}/cgroup.procs`);
        continue;
      }
      directories.push(own);
      procsFiles.push(`${own}/cgroup.procs`);
      const write = (file: string, value: string) => writes.push([`${own}/${file}`, value]);
      const read = (file: string, parse: CommandCgroupPlan["usage"][number]["parse"]) =>
        usage.push({ file: `${own}/${file}`, parse });
      switch (hierarchy.kind) {
        case "unified":
          read("cpu.stat", readCpuTimes);
          if (hierarchy.killFile) killFile = `${own}/cgroup.kill`;
          if (hierarchy.freezeFile) freezeFile = `${own}/cgroup.freeze`;
          if (controllers.has("memory")) {
            if (limits.memoryBytes !== undefined) {
              write("memory.max", String(limits.memoryBytes));
              if (hierarchy.swapLimit) write("memory.swap.max", "0");
            }
            if (hierarchy.peakFile) read("memory.peak", readPeakMemory);
            read("memory.current", readCurrentMemory);
            read("memory.events", readOomKills);
          }
          if (controllers.has("cpu")) {
            if (limits.cpuMillis !== undefined) write("cpu.max", `${limits.cpuMillis * 100} 100000`);
            if (limits.cpuWeight !== undefined) write("cpu.weight", String(limits.cpuWeight));
          }
          if (controllers.has("io")) read("io.stat", readIoBytes);
          if (controllers.has("pids") && limits.maxTasks !== undefined) write("pids.max", String(limits.maxTasks));
          break;
        case "memory":
          if (limits.memoryBytes !== undefined) {
            write("memory.limit_in_bytes", String(limits.memoryBytes));
            if (hierarchy.swapLimit) write("memory.memsw.limit_in_bytes", String(limits.memoryBytes));
          }
          read("memory.max_usage_in_bytes", readPeakMemory);
          read("memory.usage_in_bytes", readCurrentMemory);
          read("memory.oom_control", readOomKills);
          break;
        case "cpu":
          if (limits.cpuMillis !== undefined) {
            write("cpu.cfs_period_us", "100000");
            write("cpu.cfs_quota_us", String(limits.cpuMillis * 100));
          }
          if (limits.cpuWeight !== undefined)
            write("cpu.shares", String(Math.max(2, Math.round((1024 * limits.cpuWeight) / 100))));
          if (controllers.has("cpuacct") && !unified) read("cpuacct.stat", readCpuTimes);
          break;
        case "cpuacct":
          read("cpuacct.stat", readCpuTimes);
          break;
        case "freezer":
          freezeFile = `${own}/freezer.state`;
          break;
      }
    }
    return { directories, writes, procsFiles, usage, killFile, freezeFile };
  }

  /**
   * Recreates directories a {@link close} removed (a launcher may outlive one manager); called
   * before each command joins them. Throws when someone else created one of them meanwhile (it is
   * not adopted); other errors are left to the join, which reports them.
   */
  ensure(): void {
    // Only after a close: no filesystem probe per command otherwise.
    if (!this.closed) return;
    this.closed = false;
    for (const { directory, settings } of this.hierarchies) {
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
    this.closed = true;
    for (const { directory } of this.hierarchies) {
      try {
        rmdirSync(directory);
      } catch {
        // Still busy or already gone.
      }
    }
  }
}

/**
 * Creates the daemon's directory in the unified hierarchy, where it is writable, with every
 * controller of memory, cpu, io (and pids, when asked) that is available there enabled below it
 * and the daemon-wide limits written; undefined where there is none or it is not writable.
 */
function createUnified(
  memoryBytes: number,
  cpuWeight: number,
  pids: { maxTasksTotal?: number } | undefined,
): Hierarchy | undefined {
  const candidate = unifiedDirectory();
  if (candidate === undefined) return undefined;
  removeLeftoverCgroups(candidate);
  let directory: string;
  try {
    directory = createDaemonCgroup(candidate);
  } catch {
    return undefined;
  }
  const settings: Record<string, string> = {};
  const controllers = new Set<string>();
  try {
    const available = readFileSync(path.join(directory, "cgroup.controllers"), "utf8").split(/\s+/);
    const wanted = ["memory", "cpu", "io", ...(pids !== undefined ? ["pids"] : [])];
    for (const controller of wanted) {
      if (!available.includes(controller)) continue;
      try {
        writeFileSync(path.join(directory, "cgroup.subtree_control"), `+${controller}`);
        controllers.add(controller);
      } catch {
        // Not delegated to us: commands go without it.
      }
    }
    if (controllers.has("memory") && memoryBytes > 0) settings["memory.max"] = String(memoryBytes);
    // cgroup v2's default weight is 100 (v1's shares 1024).
    if (controllers.has("cpu") && cpuWeight > 0)
      settings["cpu.weight"] = String(Math.max(1, Math.min(10_000, Math.round(100 * cpuWeight))));
    const total = pids?.maxTasksTotal;
    if (controllers.has("pids") && total !== undefined && total > 0) settings["pids.max"] = String(total);
    for (const [file, value] of Object.entries(settings)) writeFileSync(path.join(directory, file), value);
    // A trial child tells which optional files this kernel has (once, not per command).
    const probe = path.join(directory, "probe");
    mkdirSync(probe);
    const exists = (file: string) => existsSync(path.join(probe, file));
    const hierarchy: Hierarchy = {
      kind: "unified",
      directory,
      settings,
      controllers,
      swapLimit: exists("memory.swap.max"),
      peakFile: exists("memory.peak"),
      killFile: exists("cgroup.kill"),
      freezeFile: exists("cgroup.freeze"),
    };
    rmdirSync(probe);
    return hierarchy;
  } catch {
    removeCgroupQuietly(directory);
    return undefined;
  }
}

/** The daemon's own directory in the unified hierarchy, where cgroup2 is mounted; undefined otherwise. */
function unifiedDirectory(): string | undefined {
  let mounts: string;
  let own: string;
  try {
    mounts = readFileSync("/proc/self/mountinfo", "utf8");
    own = readFileSync("/proc/self/cgroup", "utf8");
  } catch {
    return undefined;
  }
  const relative = /^0::(.*)$/m.exec(own)?.[1];
  if (relative === undefined) return undefined;
  for (const line of mounts.split("\n")) {
    const [before, after] = line.split(" - ");
    if (after?.split(" ")[0] !== "cgroup2") continue;
    const fields = before!.split(" ");
    const root = fields[3]!;
    const mountPoint = fields[4]!;
    // A mount of a subtree (a container's namespace root): the own path is relative to it.
    if (root !== "/" && !relative.startsWith(root)) continue;
    return path.join(mountPoint, root === "/" ? relative : relative.slice(root.length));
  }
  return undefined;
}

/**
 * Creates the daemon's directory in the cgroup v1 hierarchy of `kind`, with `settings` written;
 * undefined where there is none or it is not writable.
 */
function createV1(kind: Exclude<HierarchyKind, "unified">, settings: Record<string, string>): Hierarchy | undefined {
  // A freezer mounted with another controller (memory, cpu, pids, cpuset...): a second directory there
  // would move commands out of the other's (a task is in one cgroup per hierarchy), dropping their
  // limits, or fail to join (cpuset). Such trees are swept.
  if (kind === "freezer" && !hierarchyOfItsOwn("freezer")) return undefined;
  for (const candidate of ownCgroupDirectories(kind)) {
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
      const controllers = new Set([kind]);
      // cpu and cpuacct are often mounted together: its cpuacct.stat is then the CPU times.
      if (kind === "cpu" && existsSync(path.join(directory, "cpuacct.stat"))) controllers.add("cpuacct");
      return {
        kind,
        directory,
        settings,
        controllers,
        swapLimit: kind === "memory" && existsSync(path.join(directory, "memory.memsw.limit_in_bytes")),
        peakFile: false,
        killFile: false,
        freezeFile: kind === "freezer",
      };
    } catch {
      removeCgroupQuietly(directory);
    }
  }
  return undefined;
}

/** Whether `controller` has a v1 hierarchy of its own: a line of /proc/self/cgroup names it alone. */
function hierarchyOfItsOwn(controller: string): boolean {
  try {
    return readFileSync("/proc/self/cgroup", "utf8")
      .split("\n")
      .some((line) => line.split(":")[1] === controller);
  } catch {
    return false;
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
