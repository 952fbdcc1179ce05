import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cgroupFavoringMoves, favorCgroupMoves } from "../src/process/cgroup-moves.js";
import { connect } from "../src/client/index.js";
import { Launcher } from "../src/process/index.js";
import { loadNativeAddon } from "../src/process/native.js";
import { startDaemonProcess, type DaemonProcess } from "./support/daemon-process.js";

const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-cgroup-moves-"));
afterAll(() => rmSync(workspace, { recursive: true, force: true }));

const addon = loadNativeAddon();

/** The cgroup2 mount of this namespace: where, its per-mount options, its super options. */
function cgroup2Mount(): { mountPoint: string; mountOptions: string[]; superOptions: string[] } | undefined {
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const [before, after] = line.split(" - ");
    const [type, , superOptions = ""] = after?.split(" ") ?? [];
    if (type !== "cgroup2") continue;
    const fields = before.split(" ");
    return { mountPoint: fields[4], mountOptions: fields[5].split(","), superOptions: superOptions.split(",") };
  }
  return undefined;
}

/** MS_* bits of mount(2) for the per-mount options mountinfo shows. */
const mountFlags: Record<string, number> = { ro: 1, nosuid: 2, nodev: 4, noexec: 8, noatime: 1024, nodiratime: 2048, relatime: 1 << 21, strictatime: 1 << 24 };
const msRemount = 32;

/**
 * Turns favordynmods off as an operator would: a remount of cgroup2 with every other option as it is.
 * (From Linux 6.18 moves stay fast after a first favordynmods until reboot; the option as mountinfo
 * shows it, which is what the daemon decides by, goes off.)
 */
function clearFavordynmods(): void {
  const mount = cgroup2Mount()!;
  const flags = mount.mountOptions.reduce((bits, option) => bits | (mountFlags[option] ?? 0), msRemount);
  const options = mount.superOptions.filter((option) => option !== "favordynmods" && option !== "rw" && option !== "ro");
  addon!.mount("cgroup2", mount.mountPoint, "cgroup2", flags, options.join(","));
  expect(cgroupFavoringMoves()).toBe(false);
}

async function stopped(daemon: DaemonProcess): Promise<void> {
  daemon.child.kill("SIGTERM");
  await daemon.exited();
}

const privatePaths = () => readdirSync(tmpdir()).filter((name) => name.startsWith("sandboxd-cgroup2-"));

describe.skipIf(process.getuid?.() !== 0 || addon === null || cgroup2Mount() === undefined || !Launcher.create().usesCgroups)(
  "the daemon turns on favordynmods, so commands join their cgroups without waiting after a pause",
  () => {
    it("turns it on at start, keeping every other cgroup2 option, and leaves no mount or directory behind", async () => {
      clearFavordynmods();
      const before = cgroup2Mount()!;
      const mounts = readFileSync("/proc/self/mountinfo", "utf8").split("\n").length;
      const daemon = await startDaemonProcess(["--workspace", workspace]);
      try {
        // "already" when a daemon of another test file, started meanwhile, turned it on first.
        expect(daemon.stderr()).toMatch(/cgroup moves: favordynmods on \((turned on now, kernel-wide|already)\)/);
        const after = cgroup2Mount()!;
        expect(after.superOptions).toEqual([...before.superOptions, "favordynmods"]);
        expect(after.mountOptions).toEqual(before.mountOptions);
        expect(readFileSync("/proc/self/mountinfo", "utf8").split("\n").length).toBe(mounts);
        expect(privatePaths()).toEqual([]);
        // Commands still join their cgroups and run.
        const sandbox = await connect({ baseUrl: daemon.url });
        try {
          const result = await sandbox.exec("cat /proc/self/cgroup");
          expect(result.exitCode).toBe(0);
          expect(result.stdout).toMatch(/pids:\/.*sandboxd\./);
        } finally {
          await sandbox.close();
        }
      } finally {
        await stopped(daemon);
      }
    });

    it("leaves it as it is with --no-favordynmods", async () => {
      clearFavordynmods();
      const daemon = await startDaemonProcess(["--workspace", workspace, "--no-favordynmods"]);
      try {
        // (Not the kernel's state: a daemon of another test file may turn it on meanwhile.)
        expect(daemon.stderr()).not.toContain("cgroup moves");
      } finally {
        await stopped(daemon);
        favorCgroupMoves();
      }
    });

    it("reports an option already on as such, and mounts nothing", () => {
      favorCgroupMoves();
      expect(favorCgroupMoves()).toEqual({ state: "favored", by: "already" });
    });
  },
);
