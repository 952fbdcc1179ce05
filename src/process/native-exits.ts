import type { ChildExit } from "./child.js";
import type { NativeAddon } from "./native.js";
import { signalName } from "./signals.js";

/** Children started by the addon that have not been reaped, with what to tell when they are. */
const waiting = new Map<number, (exit: ChildExit) => void>();
let addon: NativeAddon | undefined;
let safetyNet: NodeJS.Timeout | undefined;

/** Reaps every waiting child that has exited (waitpid with WNOHANG, one pid at a time: never another's child). */
function sweep(): void {
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
  if (waiting.size === 0 && safetyNet !== undefined) {
    clearInterval(safetyNet);
    safetyNet = undefined;
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
