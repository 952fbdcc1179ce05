import { readdirSync, readFileSync } from "node:fs";

/** Polls `check` every `intervalMs` until it returns a truthy value or `timeoutMs` passes (then throws). */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  {
    timeoutMs = 10_000,
    intervalMs = 20,
    what = "condition",
  }: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Checks `check` every `intervalMs` for `forMs` and throws as soon as it returns a falsy value: that
 * something does not happen, asserted over the whole window instead of with a sleep and one look at
 * the end.
 */
export async function holdsFor(
  check: () => unknown | Promise<unknown>,
  { forMs, intervalMs = 20, what = "condition" }: { forMs: number; intervalMs?: number; what?: string },
): Promise<void> {
  const until = Date.now() + forMs;
  for (;;) {
    if (!(await check())) throw new Error(`${what} stopped holding before ${forMs} ms passed`);
    if (Date.now() >= until) return;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Whether a pid exists and is not a zombie, read from /proc. */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** Pids of live (non-zombie) processes in process group `pgid`, read from /proc. */
export function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[2]) === pgid && fields[0] !== "Z") members.push(Number(entry));
    } catch {
      // The process went away while we looked.
    }
  }
  return members;
}

/** Pids of live processes whose command line contains `marker`, read from /proc. */
export function processesWithMarker(marker: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = commandLine(Number(entry)).replaceAll("\0", " ");
      if (cmdline.includes(marker) && isAlive(Number(entry))) found.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * The command line of `pid` as /proc gives it (each argument followed by NUL), waiting out an exec in
 * progress: the kernel lets a vfork-style parent go on as the exec replaces the child's memory, before
 * it sets up the new program's arguments, and meanwhile `cmdline` reads empty. "" for a kernel thread
 * or a zombie; throws when the process is gone.
 */
export function commandLine(pid: number): string {
  // The exec takes microseconds, but a loaded machine may not run it for a while.
  const deadline = Date.now() + 5000;
  for (;;) {
    const text = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    if (text !== "" || Date.now() > deadline || isKernelThread(pid) || !isAlive(pid)) return text;
    Atomics.wait(pause, 0, 0, 1);
  }
}

/** Whether `pid` is a kernel thread (PF_KTHREAD in its /proc stat flags), which has no command line. */
function isKernelThread(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const flags = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[6]);
    return (flags & 0x00200000) !== 0;
  } catch {
    return false;
  }
}

/** Resident set size of `pid` in bytes (VmRSS of /proc/<pid>/status). */
export function residentBytes(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;
}

/**
 * Runs `work` while sampling the RSS of `pid` every `intervalMs`; resolves with its result and how
 * far the RSS rose above its level at the start (the peak sampled, or the level at the end).
 */
export async function rssGrowthDuring<T>(
  pid: number,
  work: () => Promise<T>,
  intervalMs = 50,
): Promise<{ result: T; growth: number }> {
  const start = residentBytes(pid);
  let peak = start;
  const sampler = setInterval(() => (peak = Math.max(peak, residentBytes(pid))), intervalMs);
  try {
    const result = await work();
    return { result, growth: Math.max(peak, residentBytes(pid)) - start };
  } finally {
    clearInterval(sampler);
  }
}

/** Number of open file descriptors of this process. */
export function openFileDescriptors(pid: number | "self" = "self"): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}
