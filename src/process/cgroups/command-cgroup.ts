import { closeSync, mkdirSync, openSync, readSync, rmdirSync, writeFileSync } from "node:fs";
import { cgroupMembers, killTasks } from "./cgroup-leftovers.js";
import { keyedValue, parseCpuTimes, parseIoBytes, type ResourceUsage } from "./resource-usage.js";

/**
 * The limits one command runs under, resolved (the daemon's defaults applied, its caps checked):
 * undefined fields are not limited in the command's own cgroups (the daemon-wide ones still apply).
 */
export interface CommandLimits {
  /** Most memory of its tree, in bytes. */
  memoryBytes?: number;
  /** CPU quota in thousandths of one CPU per 100 ms period. */
  cpuMillis?: number;
  /** CPU weight against other commands, 1 to 10000 (100 the default). */
  cpuWeight?: number;
  /** Most tasks of its tree at once (where the pids controller is in a hierarchy of {@link CommandCgroup}). */
  maxTasks?: number;
}

/** A command's cgroups could not be set up: at their creation, or as its limits were written (the `cause` says why). */
export class CgroupSetupError extends Error {
  constructor(
    /** The step that failed. */
    readonly step: "create" | "limits",
    cause: unknown,
  ) {
    super((cause as Error).message, { cause });
    this.name = "CgroupSetupError";
  }
}

/** Where one kind of figure of a command's usage is read from, and how it is parsed. */
export interface UsageSource {
  /** The file, relative to the command's directory in its hierarchy. */
  readonly file: string;
  /** Reads the figures out of the file's text into `usage`. */
  readonly parse: (text: string, usage: ResourceUsage) => void;
}

/**
 * What the cgroups of a command are made of before anything is created: the directories to make,
 * the files to write in them (limits) and the `cgroup.procs` files the command joins, in order.
 * The daemon does these itself ({@link CommandCgroup.create}); they are plain data so that another
 * process could do them.
 */
export interface CommandCgroupPlan {
  /** Directories to create, with a plain mkdir (never adopting one that exists). */
  readonly directories: readonly string[];
  /** Files to write once the directories exist: `[path, value]`, in order. */
  readonly writes: ReadonlyArray<readonly [string, string]>;
  /** The `cgroup.procs` files the command writes its pid to, one per hierarchy. */
  readonly procsFiles: readonly string[];
  /** Where each figure of its usage is read from, by absolute path. */
  readonly usage: ReadonlyArray<{ readonly file: string; readonly parse: UsageSource["parse"] }>;
  /** The cgroup v2 `cgroup.kill` of its own directory, where the kernel has one (Linux 5.14+). */
  readonly killFile?: string;
  /**
   * The freezer of its own directory, cgroup v2's `cgroup.freeze` (Linux 5.2+) or the cgroup v1
   * freezer's `freezer.state`: a tree kill without `cgroup.kill` freezes first.
   */
  readonly freezeFile?: string;
}

/** A freezer's file, what freezes and thaws through it, and whether the cgroup is frozen now. */
interface Freezer {
  readonly freeze: string;
  readonly thaw: string;
  frozen(): boolean;
}

/**
 * The freezer of a `freezeFile`: v1's `freezer.state` (FROZEN once every task stopped, FREEZING
 * before) or v2's `cgroup.freeze` (frozen once `cgroup.events` says `frozen 1`).
 */
function freezerOf(freezeFile: string): Freezer {
  if (freezeFile.endsWith("/freezer.state")) {
    return { freeze: "FROZEN", thaw: "THAWED", frozen: () => readSmallFile(freezeFile)?.trim() === "FROZEN" };
  }
  const events = `${freezeFile.slice(0, -"/cgroup.freeze".length)}/cgroup.events`;
  return { freeze: "1", thaw: "0", frozen: () => keyedValue(readSmallFile(events) ?? "", "frozen") === 1 };
}

/** How {@link CommandCgroup.kill} killed the tree (see `CgroupCapabilities.treeKill`). */
export type TreeKill = "cgroup.kill" | "freeze" | "sweep";

/**
 * How long a freeze is waited for, in milliseconds: it takes microseconds (a task stops at its next
 * return to user space), longer on a busy machine; a task that does not stop (in uninterruptible
 * sleep) is killed all the same, and the removal sweeps after.
 */
const freezeWaitMs = 100;

/**
 * CommandCgroup is the cgroups of one command of its own (see `ResourceCgroup`): made before it
 * starts, read for its usage (live, and once as it ends, before they go), killed as a whole (every
 * process of its tree, double-forked daemons included), and removed once empty. Never reused: a
 * command's figures are its own.
 */
export class CommandCgroup {
  private removed = false;
  /** Whether a kill froze the tree already: later kills (the removal's retries) sweep, never waiting for a freeze again. */
  private frozeOnce = false;

  private constructor(private readonly plan: CommandCgroupPlan) {}

  /**
   * Makes the directories of `plan` and writes its limits; on a failure removes what it made and
   * throws a {@link CgroupSetupError} (the command is not started).
   */
  static create(plan: CommandCgroupPlan): CommandCgroup {
    const made: string[] = [];
    let step: CgroupSetupError["step"] = "create";
    try {
      for (const directory of plan.directories) {
        mkdirSync(directory);
        made.push(directory);
      }
      step = "limits";
      for (const [file, value] of plan.writes) writeFileSync(file, value);
    } catch (error) {
      for (const directory of made.reverse()) removeQuietly(directory);
      throw new CgroupSetupError(step, error);
    }
    return new CommandCgroup(plan);
  }

  /** The `cgroup.procs` files the command joins, one per hierarchy. */
  get procsFiles(): readonly string[] {
    return this.plan.procsFiles;
  }

  /**
   * Reads what the command's tree has used so far from its cgroups. `live` also reads the memory in
   * use now. A figure whose file cannot be read is left out (unknown).
   */
  readUsage(live = false): ResourceUsage {
    const usage: ResourceUsage = {};
    if (this.removed) return usage;
    for (const source of this.plan.usage) {
      if (!live && source.parse === readCurrentMemory) continue;
      const text = readSmallFile(source.file);
      if (text !== undefined) source.parse(text, usage);
    }
    return usage;
  }

  /**
   * Kills every process of the command's cgroups at once: the kernel's `cgroup.kill` where it has
   * one (no process can fork its way out of it); else, with a freezer (cgroup v2's, or v1's), freezes
   * the tree (no task forks once frozen), sends SIGKILL to each member and thaws it (a frozen task
   * dies of SIGKILL as it is thawed or at once), the first time only (a task that will not freeze,
   * in uninterruptible sleep, holds each freeze up to {@link freezeWaitMs}); else SIGKILL to each
   * member listed now (the removal sweeps again until none is left). Returns how.
   */
  kill(): TreeKill {
    if (this.plan.killFile !== undefined) {
      try {
        writeFileSync(this.plan.killFile, "1");
        return "cgroup.kill";
      } catch {
        // An older kernel after all: the freezer or the sweep below.
      }
    }
    if (this.plan.freezeFile !== undefined && !this.frozeOnce) {
      this.frozeOnce = true;
      if (this.freezeAndKill(this.plan.freezeFile)) return "freeze";
    }
    for (const directory of this.plan.directories) killTasks(cgroupMembers(directory) ?? []);
    return "sweep";
  }

  /** Freezes the tree of `freezeFile`'s cgroup, kills every member, thaws it; false when the freezer cannot be used. */
  private freezeAndKill(freezeFile: string): boolean {
    const freezer = freezerOf(freezeFile);
    try {
      writeFileSync(freezeFile, freezer.freeze);
    } catch {
      return false;
    }
    try {
      // Frozen once the freezer says so: then no member is between a fork and its child's start.
      const until = performance.now() + freezeWaitMs;
      while (!freezer.frozen() && performance.now() < until);
      // Killed, then listed again while still frozen, until the list holds only the killed (a member
      // that forked as the freeze came is listed the second time).
      const killed = new Set<number>();
      for (let round = 0; round < 10; round++) {
        const fresh = this.plan.directories
          .flatMap((each) => cgroupMembers(each) ?? [])
          .filter((pid) => !killed.has(pid));
        if (fresh.length === 0) break;
        killTasks(fresh);
        for (const pid of fresh) killed.add(pid);
      }
    } finally {
      try {
        writeFileSync(freezeFile, freezer.thaw);
      } catch {
        // Removed meanwhile: nothing is left to thaw.
      }
    }
    return true;
  }

  /**
   * Kills what is left of the command and removes its directories once they are empty, sweeping
   * (kill the members listed, wait) for about a second at most; a directory still busy after that
   * is left for a later daemon's sweep of leftovers. Resolves when done.
   */
  async remove(): Promise<void> {
    if (this.removed) return;
    this.removed = true;
    let pending = [...this.plan.directories];
    for (let attempt = 0; attempt < 50 && pending.length > 0; attempt++) {
      if (attempt > 0) this.kill();
      // rmdir first: an empty cgroup (nearly always, as its leader was reaped) goes in one call; a busy
      // one (EBUSY) has its members listed and killed.
      pending = pending.filter((directory) => {
        try {
          rmdirSync(directory);
          return false;
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
        }
        killTasks(cgroupMembers(directory) ?? []);
        return true;
      });
      if (pending.length > 0) await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

/** One buffer for every read of a cgroup file: they are small (cpu.stat is the largest, under 1 KiB) and read synchronously. */
const readBuffer = Buffer.allocUnsafe(4096);

/**
 * The text of a small cgroup file, read with one open, read and close (readFileSync adds a stat and
 * a buffer per call: this runs a few times for every command that ends); undefined when it cannot
 * be read.
 */
function readSmallFile(file: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch {
    return undefined;
  }
  try {
    return readBuffer.toString("latin1", 0, readSync(fd, readBuffer, 0, readBuffer.length, null));
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

function removeQuietly(directory: string): void {
  try {
    rmdirSync(directory);
  } catch {
    // Busy or gone.
  }
}

/** cgroup v2 `cpu.stat` or v1 `cpuacct.stat`. */
export function readCpuTimes(text: string, usage: ResourceUsage): void {
  Object.assign(usage, parseCpuTimes(text));
}

/** cgroup v2 `memory.peak` or v1 `memory.max_usage_in_bytes`: one number. */
export function readPeakMemory(text: string, usage: ResourceUsage): void {
  const value = Number(text.trim());
  if (Number.isFinite(value)) usage.memoryPeakBytes = value;
}

/** cgroup v2 `memory.current` or v1 `memory.usage_in_bytes`: one number (live readings only). */
export function readCurrentMemory(text: string, usage: ResourceUsage): void {
  const value = Number(text.trim());
  if (Number.isFinite(value)) usage.memoryCurrentBytes = value;
}

/** cgroup v2 `memory.events` or v1 `memory.oom_control`: the `oom_kill` line. */
export function readOomKills(text: string, usage: ResourceUsage): void {
  const value = keyedValue(text, "oom_kill");
  if (value !== undefined) usage.oomKills = value;
}

/** cgroup v2 `io.stat` or v1 `blkio.throttle.io_service_bytes`. */
export function readIoBytes(text: string, usage: ResourceUsage): void {
  Object.assign(usage, parseIoBytes(text));
}
