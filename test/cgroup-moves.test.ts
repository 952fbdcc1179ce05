import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cgroupFavoringMoves, favorCgroupMoves } from "../src/process/cgroups/cgroup-moves.js";
import { connect } from "../src/client/index.js";
import { Launcher } from "../src/process/index.js";
import { loadNativeAddon } from "../src/process/native/native.js";
import { startDaemonProcess, type DaemonProcess } from "./support/daemon-process.js";
import { waitFor } from "./support/processes.js";

const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-cgroup-moves-"));
afterAll(() => rmSync(workspace, { recursive: true, force: true }));

const addon = loadNativeAddon();

/** The super options of the cgroup2 mount of this namespace, or undefined when none is mounted. */
function cgroup2Options(): string[] | undefined {
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const [type, , superOptions = ""] = line.split(" - ")[1]?.split(" ") ?? [];
    if (type === "cgroup2") return superOptions.split(",");
  }
  return undefined;
}

/**
 * Turns favordynmods off as the daemon turns it on: a cgroup2 superblock request with every other
 * option as it is. Returns false where the kernel keeps it on regardless (a kernel may refuse to turn it
 * off once moves lock per thread group).
 */
function clearFavordynmods(): boolean {
  const options = cgroup2Options()!.filter((option) => option !== "favordynmods" && option !== "rw" && option !== "ro");
  addon!.configureFilesystem("cgroup2", options);
  return !cgroupFavoringMoves();
}

async function stopped(daemon: DaemonProcess): Promise<void> {
  daemon.child.kill("SIGTERM");
  await daemon.exited();
}

/** How many filesystems this namespace has mounted. */
const mountCount = () => readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter(Boolean).length;

// Left as it was found.
const onAtStart = cgroupFavoringMoves();
afterAll(() => {
  if (process.getuid?.() !== 0 || addon === null || cgroup2Options() === undefined) return;
  if (onAtStart) favorCgroupMoves();
  else clearFavordynmods();
});

/** Whether commands use cgroups here (the probe's cgroup directories removed again). */
function commandsUseCgroups(): boolean {
  const probe = Launcher.create();
  probe.close();
  return probe.usesCgroups;
}

describe.skipIf(process.getuid?.() !== 0 || addon === null || cgroup2Options() === undefined || !commandsUseCgroups())(
  "the daemon turns on favordynmods, so commands join their cgroups without waiting after a pause",
  () => {
    it("turns it on at start, keeping every other cgroup2 option, and mounts nothing", async (context) => {
      if (!clearFavordynmods()) context.skip();
      const before = cgroup2Options()!;
      const mounts = mountCount();
      // At debug level: the "already" line is debug only (nothing changed for a person to hear of).
      const daemon = await startDaemonProcess(["--workspace", workspace, "--log-level", "debug"]);
      try {
        // "already" when a daemon of another test file, started meanwhile, turned it on first.
        // The start-up lines after the first one may still be on their way when the daemon answers.
        const favoring = /cgroup moves: favordynmods on \((turned on now, kernel-wide|already)\)/;
        await waitFor(() => favoring.test(daemon.stderr()), { what: "the favordynmods start line" }).catch(() => {});
        expect(daemon.stderr()).toMatch(favoring);
        expect(new Set(cgroup2Options())).toEqual(new Set([...before, "favordynmods"]));
        expect(mountCount()).toBe(mounts);
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

    it("leaves it as it is with --no-favordynmods", async (context) => {
      if (!clearFavordynmods()) context.skip();
      const daemon = await startDaemonProcess(["--workspace", workspace, "--no-favordynmods"]);
      try {
        // (Not the kernel's state: a daemon of another test file may turn it on meanwhile.)
        expect(daemon.stderr()).not.toContain("cgroup moves");
      } finally {
        await stopped(daemon);
        favorCgroupMoves();
      }
    });

    it("reports an option already on as such", () => {
      favorCgroupMoves();
      expect(favorCgroupMoves()).toEqual({ state: "favored", by: "already" });
    });
  },
);
