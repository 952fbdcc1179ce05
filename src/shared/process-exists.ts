import { existsSync, readFileSync } from "node:fs";

/** Whether a process with this pid exists, a zombie included (its /proc entry is there); another user's counts too. */
export function processExists(pid: number): boolean {
  return existsSync(`/proc/${pid}`);
}

/** Whether a process with this pid exists and is not a zombie (it has not exited). */
export function processRunning(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}
