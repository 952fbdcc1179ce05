import { randomBytes } from "node:crypto";
import { mkdirSync, readlinkSync } from "node:fs";
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
  own ??= { pidNamespace: pidNamespace("self") ?? "0", pid: process.pid, startTime: processStartTime(process.pid) ?? 0, token: randomBytes(4).toString("hex") };
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

/**
 * Whether `name` is a sandboxd daemon's cgroup directory whose daemon has certainly exited: one of
 * ours ({@link daemonCgroupName}), named by a daemon of this process's pid namespace whose pid is
 * gone or belongs to a process started at another time. A daemon of another pid namespace (another
 * container's) cannot be seen from here, so its directories are never judged gone, nor is anything
 * else: a leftover is only ever removed when its owner is known to be dead.
 */
export function cgroupOwnerGone(name: string): boolean {
  const match = /^sandboxd\.(\d+)\.(\d+)\.(\d+)\.[0-9a-f]+\.\d+$/.exec(name);
  if (match === null) return false;
  const [, namespace, pid, startTime] = match;
  if (namespace !== ownOwner().pidNamespace || namespace === "0") return false;
  if (Number(pid) === process.pid) return Number(startTime) !== ownOwner().startTime;
  return processStartTime(Number(pid)) !== Number(startTime);
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
