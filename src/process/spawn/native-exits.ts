import type { ChildProcess } from "node:child_process";
import { subscribe } from "node:diagnostics_channel";
import { readFileSync } from "node:fs";
import type { ChildExit } from "./child.js";
import { loadNativeAddon, type NativeAddon } from "../native/index.js";
import { signalName } from "../signals.js";

/** Children started by the addon that have not been reaped, with what to tell when they are. */
const waiting = new Map<number, (exit: ChildExit) => void>();
let addon: NativeAddon | undefined;
let safetyNet: NodeJS.Timeout | undefined;
/** Spawns on a worker thread not yet registered: a SIGCHLD meanwhile may be for one of them. */
let spawnsInFlight = 0;
let signalWhileSpawning = false;
/** Whether exited children that are nobody's (orphans re-parented to this process) are reaped: see {@link reapOrphans}. */
let reapingOrphans = false;
/** child_process children of this process not known to have exited: libuv reaps those, never the orphan sweep. */
const childProcesses = new Set<ChildProcess>();
/** A later sweep, when orphans may be waiting behind a child that is not the sweep's to reap. */
// biome-ignore lint/correctness/noUnusedVariables: read by `??=` in the sweep
let orphanRetry: NodeJS.Timeout | undefined;
let orphansReaped = 0;

// From the moment this module loads (the daemon loads it before it starts anything), so that a child
// started later through child_process is known as libuv's to reap.
subscribe("child_process", (message) => {
  const child = (message as { process?: ChildProcess }).process;
  if (child === undefined) return;
  if (childProcesses.size >= 256) forgetEndedChildProcesses();
  childProcesses.add(child);
  child.once("exit", () => childProcesses.delete(child));
});

/** Notes that a spawn is under way on another thread; call the returned function once its pid is watched. */
export function spawnStarting(): () => void {
  spawnsInFlight++;
  let done = false;
  return () => {
    if (done) return;
    done = true;
    spawnsInFlight--;
    // Its SIGCHLD may have come before its pid was waited for: look again, once.
    if (signalWhileSpawning) setImmediate(sweep);
    if (spawnsInFlight === 0) signalWhileSpawning = false;
  };
}

/**
 * Reaps `pid` now if it has exited (its exit is then told as usual) and says whether it has: a kill
 * must not wait for SIGCHLD's turn of the loop to learn that the group is gone.
 */
export function reapNow(pid: number): boolean {
  const resolve = waiting.get(pid);
  if (resolve === undefined) return true;
  let result;
  try {
    result = addon!.reap(pid);
  } catch {
    // ECHILD: somebody else reaped it; how it ended is not known (the exit's cause says unknown).
    result = { code: null, signal: null };
  }
  if (result === undefined) return false;
  waiting.delete(pid);
  resolve(
    result.signal !== null ? { code: null, signal: signalName(result.signal) } : { code: result.code, signal: null },
  );
  return true;
}

/**
 * Reaps every waiting child that has exited, never another's (child_process reaps its own). The
 * kernel names the exited children one at a time (a peek that collects nothing) and each of ours is
 * reaped: two calls an exit, however many children wait (asking each waiting pid cost 1,000 calls a
 * SIGCHLD with 1,000 background processes: +0.4 ms of daemon CPU per exec). An orphan named is
 * reaped too once {@link reapOrphans} is on. When the child named is nobody's to reap here (a
 * child_process child libuv has yet to collect), or the peek fails, each waiting pid is asked
 * instead and the orphans are looked at again a little later.
 */
function sweep(): void {
  if (spawnsInFlight > 0) signalWhileSpawning = true;
  for (;;) {
    let pid: number;
    try {
      pid = addon!.exitedChild();
    } catch {
      pid = -1;
    }
    if (pid === 0) break;
    if (pid > 0 && (waiting.has(pid) ? reapNow(pid) : reapOrphan(pid))) continue;
    askEachWaiting();
    if (reapingOrphans) orphanRetry ??= setTimeout(sweepAgain, 100).unref();
    break;
  }
  if (waiting.size === 0 && safetyNet !== undefined) {
    clearInterval(safetyNet);
    safetyNet = undefined;
  }
}

function sweepAgain(): void {
  orphanRetry = undefined;
  sweep();
}

/**
 * Reaps `pid`, an exited child that is not waited for, when it is an orphan: not a child_process
 * child (libuv's to reap, and its exit event would never come), and not a spawn still on its way
 * to being watched (its pid is not known yet; those lead a session of their own, so a child that
 * does not cannot be one). Says whether it was reaped.
 */
function reapOrphan(pid: number): boolean {
  if (!reapingOrphans || isChildProcessChild(pid)) return false;
  if (spawnsInFlight > 0 && sessionOf(pid) === pid) return false;
  try {
    if (addon!.reap(pid) === undefined) return false;
  } catch {
    // ECHILD: collected meanwhile.
  }
  orphansReaped++;
  return true;
}

function isChildProcessChild(pid: number): boolean {
  forgetEndedChildProcesses();
  for (const child of childProcesses) if (child.pid === pid) return true;
  return false;
}

/** Drops the child_process children that exited or never started (a spawn that failed has no exit event). */
function forgetEndedChildProcesses(): void {
  for (const child of childProcesses) {
    if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) childProcesses.delete(child);
  }
}

/** The session id of a process (a zombie's too), or undefined when it is gone. */
function sessionOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[3]);
  } catch {
    return undefined;
  }
}

/** Asks each waiting pid whether it has exited (waitpid with WNOHANG), reaping those that have. */
function askEachWaiting(): void {
  for (const [pid, resolve] of waiting) {
    let result;
    try {
      result = addon!.reap(pid);
    } catch {
      // ECHILD: somebody else reaped it; nothing more will be known (the exit's cause says unknown).
      result = { code: null, signal: null };
    }
    if (result === undefined) continue;
    waiting.delete(pid);
    resolve(
      result.signal !== null ? { code: null, signal: signalName(result.signal) } : { code: result.code, signal: null },
    );
  }
}

/**
 * Listens for SIGCHLD, before the first child is started through the addon: a signal that came
 * before the listener would leave that child to the safety net.
 */
export function listenForNativeExits(native: NativeAddon): void {
  if (addon !== undefined) return;
  addon = native;
  process.on("SIGCHLD", sweep);
}

/**
 * Resolves once the child `pid`, started by the addon after {@link listenForNativeExits}, has
 * exited, and reaps it. Children are reaped on SIGCHLD (Node delivers it to every listener; libuv's
 * own handler reaps only the children it started), in a later turn of the loop as child_process
 * reports its exits, and once a second as a safety net while any is waiting; that timer also keeps
 * the event loop alive until every exit is told.
 */
export function watchNativeExit(native: NativeAddon, pid: number): Promise<ChildExit> {
  listenForNativeExits(native);
  const exited = new Promise<ChildExit>((resolve) => waiting.set(pid, resolve));
  // Kept referenced while any child is waiting: an exit still to be told keeps the loop alive, as a
  // child_process child does (Node's SIGCHLD listener does not).
  safetyNet ??= setInterval(sweep, 1000);
  return exited;
}

/** Whether {@link reapOrphans} made this process reap what its commands leave, and if not, why. */
export type OrphanReaping =
  /** A child subreaper (or PID 1): orphans below it become its children and are reaped as they exit. */
  | { state: "reaping"; pid1: boolean }
  /** Orphans go to the nearest subreaper or init, which must reap them. */
  | { state: "off"; reason: string };

/**
 * Makes this process reap what its commands leave behind: it becomes a child subreaper
 * (PR_SET_CHILD_SUBREAPER, through the addon), so a process orphaned below it (a command's
 * double-forked daemon, a background job whose shell ended) is re-parented to it rather than to the
 * machine's or container's init, and every such child is reaped as it exits, on the same SIGCHLD
 * sweep as the commands' own exits. Until reaped, an exited task still counts in its cgroup's
 * `pids.current` and against every pids limit above it; a daemon that is PID 1 of its container or
 * pid namespace gets every orphan of the namespace anyway, and without this kept them as zombies
 * forever.
 *
 * The exit statuses of this process's own children are never taken: the addon's children are
 * collected as before, child_process children (seen through the `child_process` diagnostics
 * channel from the moment this module loads) are left to libuv, and a spawn still under way is
 * recognised by its session. Children started any other way (a fork from another addon, a
 * child_process child started before this module loaded that exits later) would lose their status:
 * call this only in a process whose children all start through sandboxd or child_process, as the
 * daemon's do. A child left by the image this process exec'd from (no one's to reap) is reaped.
 * Without the addon (`native`, loaded by default) this is off, and the daemon depends on its init
 * to reap.
 */
export function reapOrphans(native: NativeAddon | null = loadNativeAddon()): OrphanReaping {
  if (reapingOrphans) return { state: "reaping", pid1: process.pid === 1 };
  if (native === null) return { state: "off", reason: "the native addon is not loaded" };
  try {
    native.becomeSubreaper();
  } catch (error) {
    return { state: "off", reason: `prctl(PR_SET_CHILD_SUBREAPER): ${(error as Error).message}` };
  }
  reapingOrphans = true;
  listenForNativeExits(native);
  // Zombies from before (children of an image this process exec'd from) are collected now.
  sweep();
  return { state: "reaping", pid1: process.pid === 1 };
}

/** How many orphans {@link reapOrphans} has reaped in this process so far. */
export function orphansReapedSoFar(): number {
  return orphansReaped;
}
