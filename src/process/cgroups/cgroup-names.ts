import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import path from "node:path";
import { processStartTime } from "../housekeeping/index.js";

/**
 * The owner a daemon's cgroup name stands for: the daemon's pid namespace (the inode of
 * `/proc/self/ns/pid`), its pid there and its start time (clock ticks since boot), and a random
 * token drawn once per process.
 */
interface CgroupOwner {
  /** "0" when /proc/self/ns/pid cannot be read: such a daemon judges no leftover gone. */
  pidNamespace: string;
  pid: number;
  startTime: number;
  token: string;
}

let own: CgroupOwner | undefined;

function ownOwner(): CgroupOwner {
  own ??= {
    pidNamespace: pidNamespace("self") ?? "0",
    pid: process.pid,
    startTime: processStartTime(process.pid) ?? 0,
    token: randomBytes(4).toString("hex"),
  };
  return own;
}

/**
 * The name of this process's `n`th cgroup directory of its own in a hierarchy:
 * `sandboxd.<pid namespace>.<pid>.<start time>.<token>.<n>`. Two daemons never share a name, even
 * each PID 1 of its own pid namespace in one cgroup (every container's daemon is pid 1): the pid
 * namespace tells them apart, the start time a later daemon with the same pid, the random token
 * the rest (a namespace's inode number may be reused once it is gone). The name is also what
 * {@link cgroupOwnerGone} judges a leftover by. Create it with a plain `mkdir`, never adopting a
 * directory that is there: on EEXIST take the next `n`.
 */
export function daemonCgroupName(n: number): string {
  const owner = ownOwner();
  return `sandboxd.${owner.pidNamespace}.${owner.pid}.${owner.startTime}.${owner.token}.${n}`;
}

/** The inode of the initial pid namespace (the kernel's PROC_PID_INIT_INO): a process in it sees every process of the machine. */
const initialPidNamespace = "4026531836";

/**
 * Whether `name` is a sandboxd daemon's cgroup directory whose daemon has certainly exited: one of
 * ours ({@link daemonCgroupName}), named by a daemon of this process's pid namespace whose pid is
 * gone or belongs to a process started at another time, or, seen from the initial pid namespace,
 * by a daemon whose whole pid namespace is gone (no process is left in it: `livePidNamespaces`
 * says which are alive, undefined when it could not tell). Anything else (another container's
 * daemon, seen from inside a container; a name of another form) is never judged gone: a leftover is
 * only ever removed when its owner is known to be dead.
 */
export function cgroupOwnerGone(
  name: string,
  livePidNamespaces: () => ReadonlySet<string> | undefined = visiblePidNamespaces,
): boolean {
  const match = /^sandboxd\.(\d+)\.(\d+)\.(\d+)\.[0-9a-f]+\.\d+$/.exec(name);
  if (match === null) return false;
  const [, namespace, pid, startTime] = match;
  const ownNamespace = ownOwner().pidNamespace;
  if (namespace === "0" || ownNamespace === "0") return false;
  if (namespace !== ownNamespace)
    return ownNamespace === initialPidNamespace && livePidNamespaces()?.has(namespace!) === false;
  if (Number(pid) === process.pid) return Number(startTime) !== ownOwner().startTime;
  return processStartTime(Number(pid)) !== Number(startTime);
}

/**
 * The pid namespaces of every process this process can see, read from /proc; undefined when one of
 * them could not be read (no permission: it may be in any namespace). A pid namespace lives as long
 * as its first process, and every process in it is killed when that one exits.
 */
export function visiblePidNamespaces(): ReadonlySet<string> | undefined {
  const namespaces = new Set<string>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const namespace = /^pid:\[(\d+)\]$/.exec(readlinkSync(`/proc/${entry}/ns/pid`))?.[1];
      if (namespace !== undefined) namespaces.add(namespace);
    } catch (error) {
      // Gone meanwhile, or a zombie (no namespaces any more): in no namespace.
      if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
      // Not allowed to look (a non-dumpable init): its status, which anyone may read, still shows
      // whether it is in a nested namespace (one pid per level); if it is, which one is unknown.
      const levels = nestingLevels(entry);
      if (levels === 1 && ownOwner().pidNamespace === initialPidNamespace) namespaces.add(initialPidNamespace);
      else if (levels !== undefined) return undefined;
    }
  }
  return namespaces;
}

/** How many pid namespaces a process is in, from the one this process sees it in down (its status's `NSpid`); undefined when gone. */
function nestingLevels(pid: string): number | undefined {
  try {
    return /^NSpid:\s*(.*)$/m
      .exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]
      ?.trim()
      .split(/\s+/).length;
  } catch {
    return undefined;
  }
}

/** The inode number of a process's pid namespace ("4026531836"), or undefined when it cannot be read. */
function pidNamespace(pid: number | "self"): string | undefined {
  try {
    return /^pid:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/ns/pid`))?.[1];
  } catch {
    return undefined;
  }
}

let created = 0;

/**
 * Creates a cgroup directory of this daemon under `parent` ({@link daemonCgroupName}) with a plain
 * `mkdir`, and returns its path; a name already taken is never adopted, the next one is tried.
 * Throws the error of the last `mkdir` (EACCES, EROFS...) when none could be created.
 */
export function createDaemonCgroup(parent: string): string {
  for (let attempt = 0; ; attempt++) {
    const directory = path.join(parent, daemonCgroupName(created++));
    try {
      mkdirSync(directory);
      return directory;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST" || attempt >= 8) throw error;
    }
  }
}
