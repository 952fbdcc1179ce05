import { readFileSync } from "node:fs";
import { loadNativeAddon } from "../native/index.js";

/**
 * Whether moving a process into a cgroup is fast on this machine, as {@link favorCgroupMoves} left it:
 * the kernel's `favordynmods` cgroup option is on (`by` says who turned it on), or it is not and why.
 */
export type CgroupMoves = { state: "favored"; by: "daemon" | "already" } | { state: "unfavored"; reason: string };

/**
 * Turns on the kernel's `favordynmods` cgroup option, once per boot of the machine, so that a command
 * joining its cgroups does not wait for an RCU grace period.
 *
 * Every write to a `cgroup.procs` file takes the kernel's global threadgroup lock for writing. By
 * default its readers (every fork and exit) take a fast path, and a writer must first wait for an RCU
 * grace period to move them off it; the kernel skips the wait only while another write happened
 * moments before. So the first command after a pause waited 6 to 20 ms per move here (each command
 * joins its pids cgroup, and on cgroup v1 its memory and cpu ones too), against 0.3 ms back to back.
 * `favordynmods` (Linux 6.0+) keeps the readers on the slow path instead, a trade the kernel's
 * documentation describes for "dynamic cgroup modifications such as task migrations" at a small cost
 * to fork and exit; since Linux 6.18 moves then lock only the moving process's thread group, and the
 * kernel keeps that until reboot.
 *
 * The option belongs to the cgroup2 hierarchy (there is one, mounted or not, even on a cgroup v1
 * machine), and each new superblock request for it sets its options kernel-wide. So this asks for one
 * with the options the mounted cgroup2 shows plus `favordynmods` (a request without one of them would
 * clear it), mounting nothing (fsopen and fsconfig: no mount point, nothing to unmount), and reads back
 * whether it took: outside the initial cgroup namespace the kernel ignores the options. It needs
 * CAP_SYS_ADMIN and the native addon; it leaves the option as it is where it is on already, and it
 * never turns it off.
 */
export function favorCgroupMoves(): CgroupMoves {
  if (cgroupFavoringMoves()) return { state: "favored", by: "already" };
  // Without a mount of cgroup2 to read its options from, a request could clear one of them.
  const before = cgroup2Options();
  if (before === undefined) return { state: "unfavored", reason: "no cgroup2 mount to read its options from" };
  const addon = loadNativeAddon();
  if (addon === null) return { state: "unfavored", reason: "the native addon is not loaded" };
  try {
    addon.configureFilesystem("cgroup2", [
      ...before.filter((option) => option !== "rw" && option !== "ro"),
      "favordynmods",
    ]);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const reason =
      code === "EPERM"
        ? "not permitted (needs CAP_SYS_ADMIN, in the initial user namespace)"
        : code === "EINVAL"
          ? "the kernel has no such option (before Linux 6.0)"
          : code === "ENOSYS"
            ? "no fsopen (before Linux 5.2)"
            : (error as Error).message;
    return { state: "unfavored", reason: `cgroup2: ${reason}` };
  }
  return cgroupFavoringMoves()
    ? { state: "favored", by: "daemon" }
    : { state: "unfavored", reason: "the kernel kept its cgroup2 options (not the initial cgroup namespace?)" };
}

/** Whether a mounted cgroup hierarchy (v1 or v2) has `favordynmods` on: moves are then fast. */
export function cgroupFavoringMoves(): boolean {
  return mountedCgroups().some((mount) => mount.superOptions.includes("favordynmods"));
}

/** The super options of a mounted cgroup2 hierarchy (the same on every mount of it), or undefined when none is mounted here. */
function cgroup2Options(): string[] | undefined {
  return mountedCgroups().find((mount) => mount.type === "cgroup2")?.superOptions;
}

interface CgroupMount {
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
    const [type, , options = ""] = line.split(" - ")[1]?.split(" ") ?? [];
    if (type === "cgroup" || type === "cgroup2") mounts.push({ type, superOptions: options.split(",") });
  }
  return mounts;
}
