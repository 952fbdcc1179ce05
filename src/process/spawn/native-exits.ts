import type { ChildExit } from "./child.js";
import type { NativeAddon } from "../native/index.js";
import { signalName } from "../signals.js";

/** Children started by the addon that have not been reaped, with what to tell when they are. */
const waiting = new Map<number, (exit: ChildExit) => void>();
let addon: NativeAddon | undefined;
let safetyNet: NodeJS.Timeout | undefined;
/** Spawns on a worker thread not yet registered: a SIGCHLD meanwhile may be for one of them. */
let spawnsInFlight = 0;
let signalWhileSpawning = false;

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
    result = { code: null, signal: 9 };
  }
  if (result === undefined) return false;
  waiting.delete(pid);
  resolve(result.signal !== null ? { code: null, signal: signalName(result.signal) } : { code: result.code, signal: null });
  return true;
}

/**
 * Reaps every waiting child that has exited, never another's (child_process reaps its own). The
 * kernel names the exited children one at a time (a peek that collects nothing) and each of ours is
 * reaped: two calls an exit, however many children wait (asking each waiting pid cost 1,000 calls a
 * SIGCHLD with 1,000 background processes: +0.4 ms of daemon CPU per exec). When the child named is
 * not ours, or the peek fails, each waiting pid is asked instead.
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
    if (pid < 0 || !waiting.has(pid) || !reapNow(pid)) {
      askEachWaiting();
      break;
    }
  }
  if (waiting.size === 0 && safetyNet !== undefined) {
    clearInterval(safetyNet);
    safetyNet = undefined;
  }
}

/** Asks each waiting pid whether it has exited (waitpid with WNOHANG), reaping those that have. */
function askEachWaiting(): void {
  for (const [pid, resolve] of waiting) {
    let result;
    try {
      result = addon!.reap(pid);
    } catch {
      // ECHILD: somebody else reaped it; nothing more will be known.
      result = { code: null, signal: 9 };
    }
    if (result === undefined) continue;
    waiting.delete(pid);
    resolve(result.signal !== null ? { code: null, signal: signalName(result.signal) } : { code: result.code, signal: null });
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
