import { mkdtempSync, readFileSync, rmdirSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { loadNativeAddon } from "./native.js";

/**
 * Whether moving a process into a cgroup is fast on this machine, as {@link favorCgroupMoves} left it:
 * the kernel's `favordynmods` cgroup option is on (`by` says who turned it on), or it is not and why.
 */
export type CgroupMoves = { state: "favored"; by: "daemon" | "already" } | { state: "unfavored"; reason: string };

/** MNT_DETACH of umount2(2). */
const mntDetach = 2;

/**
 * Turns on the kernel's `favordynmods` cgroup option, once per boot of the machine, so that a command
 * joining its cgroups does not wait for an RCU grace period.
 *
 * Every write to a `cgroup.procs` file takes the kernel's global threadgroup lock for writing. By
 * default its readers (every fork and exit) take a fast path, and a writer must first wait for an RCU
 * grace period to move them off it; the kernel skips the wait only while another write happened
 * moments before. So the first command after a pause waited 6 to 20 ms per move here (each command
 * joins its pids cgroup, and on cgroup v1 its memory and cpu ones too), against 0.3 ms back to back.
 * `favordynmods` (Linux 6.0+) keeps the readers on the slow path instead, which the kernel documents as
 * the choice for "dynamic cgroup modifications such as task migrations" at a small cost to fork and
 * exit; since Linux 6.18 moves then lock only the moving process's thread group, and the kernel keeps
 * that until reboot.
 *
 * The option belongs to the cgroup2 hierarchy (there is one, mounted or not, even on a cgroup v1
 * machine) and a new mount of it sets its options kernel-wide. So this mounts cgroup2 on a private
 * directory with the options it has now plus `favordynmods` (a mount without one of them would clear
 * it), reads back whether it took (outside the initial cgroup namespace the kernel ignores the options),
 * and unmounts. It needs root and the native addon; it leaves the option as it is where it is already
 * on, and it never turns it off.
 */
export function favorCgroupMoves(): CgroupMoves {
  if (cgroupFavoringMoves()) return { state: "favored", by: "already" };
  // Without a mount of cgroup2 to read its options from, a new mount could clear one of them.
  const before = cgroup2Options();
  if (before === undefined) return { state: "unfavored", reason: "no cgroup2 mount to read its options from" };
  const addon = loadNativeAddon();
  if (addon === null) return { state: "unfavored", reason: "the native addon is not loaded" };
  let directory: string;
  try {
    directory = mkdtempSync(path.join(tmpdir(), "sandboxd-cgroup2-"));
  } catch (error) {
    return { state: "unfavored", reason: `no directory to mount on (${(error as Error).message})` };
  }
  try {
    const options = [...before.filter((option) => option !== "rw" && option !== "ro"), "favordynmods"];
    addon.mount("cgroup2", directory, "cgroup2", 0, options.join(","));
    const applied = superOptions(directory)?.includes("favordynmods") === true;
    addon.unmount(directory, mntDetach);
    return applied ? { state: "favored", by: "daemon" } : { state: "unfavored", reason: "the kernel kept its cgroup2 options (not the initial cgroup namespace?)" };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const reason = code === "EPERM" ? "not permitted (needs root)" : code === "EINVAL" ? "the kernel has no such option (before Linux 6.0)" : (error as Error).message;
    return { state: "unfavored", reason: `mount of cgroup2: ${reason}` };
  } finally {
    try {
      rmdirSync(directory);
    } catch {
      // Still mounted (the unmount failed) or gone: nothing more to do.
    }
  }
}

/** Whether a mounted cgroup hierarchy (v1 or v2) has `favordynmods` on: moves are then fast. */
export function cgroupFavoringMoves(): boolean {
  return mountedCgroups().some((mount) => mount.superOptions.includes("favordynmods"));
}

/** The super options of a mounted cgroup2 hierarchy (the same on every mount of it), or undefined when none is mounted here. */
function cgroup2Options(): string[] | undefined {
  return mountedCgroups().find((mount) => mount.type === "cgroup2")?.superOptions;
}

/** The super options of whatever is mounted at `mountPoint`. */
function superOptions(mountPoint: string): string[] | undefined {
  return mountedCgroups().find((mount) => mount.mountPoint === mountPoint)?.superOptions;
}

interface CgroupMount {
  mountPoint: string;
  type: "cgroup" | "cgroup2";
  superOptions: string[];
}

/** The cgroup filesystems of /proc/self/mountinfo. */
function mountedCgroups(): CgroupMount[] {
  let mountinfo: string;
  try {
    mountinfo = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return [];
  }
  const mounts: CgroupMount[] = [];
  for (const line of mountinfo.split("\n")) {
    const [before, after] = line.split(" - ");
    if (after === undefined) continue;
    const [type, , options = ""] = after.split(" ");
    if (type === "cgroup" || type === "cgroup2") mounts.push({ mountPoint: before.split(" ")[4], type, superOptions: options.split(",") });
  }
  return mounts;
}
