import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { daemonNodeFlags, missingNodeFlags } from "../src/cli/sandboxd/node-flags.js";
import {
  daemonFromSource,
  startDaemonProcess,
  type DaemonCommand,
  type DaemonProcess,
} from "./support/daemon-process.js";
import { repositoryRoot } from "./support/tools.js";

const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-node-flags-"));
afterAll(() => rmSync(workspace, { recursive: true, force: true }));

/** The command line the kernel shows for a pid: what the process runs with now, after any exec. */
function commandLine(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
}

async function healthy(daemon: DaemonProcess): Promise<boolean> {
  const response = await fetch(`${daemon.url}/healthz`);
  return response.status === 200;
}

async function stopped(daemon: DaemonProcess): Promise<void> {
  daemon.child.kill("SIGTERM");
  await daemon.exited();
}

/** Starts a daemon with `command`, checks it, serving, with the command line its pid runs now, and stops it. */
async function withDaemon(
  command: DaemonCommand,
  check: (argv: string[], daemon: DaemonProcess) => void,
): Promise<void> {
  const daemon = await startDaemonProcess(["--workspace", workspace], command);
  try {
    check(commandLine(daemon.child.pid!), daemon);
    expect(await healthy(daemon)).toBe(true);
  } finally {
    await stopped(daemon);
  }
}

/** The daemon from source with Node flags of its own before the script. */
const fromSourceWith = (...nodeFlags: string[]): DaemonCommand => ({
  ...daemonFromSource,
  args: [...nodeFlags, ...(daemonFromSource.args ?? [])],
});

describe("the daemon's Node flags", () => {
  it("lists a flag as missing unless it, or a flag setting the same thing, is given on the command line or in NODE_OPTIONS", () => {
    expect(missingNodeFlags([])).toEqual([...daemonNodeFlags]);
    expect(missingNodeFlags(["--import", "tsx"])).toEqual([...daemonNodeFlags]);
    expect(missingNodeFlags([...daemonNodeFlags])).toEqual([]);
    expect(missingNodeFlags(["--initial-old-space-size=200"])).toEqual(["--max-semi-space-size=4"]);
    expect(missingNodeFlags(["--initial-heap-size=128"])).toEqual(["--max-semi-space-size=4"]);
    expect(missingNodeFlags(["--max-semi-space-size", "16"])).toEqual(["--initial-old-space-size=64"]);
    expect(missingNodeFlags([], "--max-old-space-size=512 --max-semi-space-size=8")).toEqual([
      "--initial-old-space-size=64",
    ]);
  });

  it("the image and the systemd unit start node with them, so the daemon need not restart", () => {
    const dockerfile = readFileSync(path.join(repositoryRoot, "Dockerfile"), "utf8");
    const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)![1]!) as string[];
    const unit = readFileSync(path.join(repositoryRoot, "deploy/systemd/sandboxd.service"), "utf8");
    const execStart = /^ExecStart=(.*)$/m.exec(unit)![1]!.split(" ");
    for (const argv of [entrypoint, execStart]) {
      const node = argv.indexOf("node");
      expect(node).toBeGreaterThanOrEqual(0);
      const script = argv.findIndex((argument, index) => index > node && !argument.startsWith("-"));
      expect(missingNodeFlags(argv.slice(node + 1, script))).toEqual([]);
      expect(argv[script]).toMatch(/sandboxd(\.js)?$/);
    }
  });

  it("a daemon started without them restarts itself with them: same pid, its log still on stderr", async () => {
    await withDaemon(daemonFromSource, (argv, daemon) => {
      for (const flag of daemonNodeFlags) expect(argv).toContain(flag);
      // The loader flag and the daemon's own arguments survive the restart, in order.
      expect(argv.slice(1, 3)).toEqual(["--import", "tsx"]);
      expect(argv.slice(-3)).toEqual(["0", "--workspace", workspace]);
      // The pid we started is the daemon that serves (withDaemon asks it), and its stderr (the pipe read here) reached the log.
      expect(daemon.stderr()).toMatch(/listening on/);
    });
  });

  it("restarts cleanly under V8's profiler (--cpu-prof signals the thread that execs) and writes the profile", async () => {
    // At a 10 us sampling interval a SIGPROF is nearly always pending at the exec: it killed 3 of 4
    // restarts before the addon ignored SIGPROF across it.
    for (let attempt = 0; attempt < 3; attempt++) {
      const profiles = mkdtempSync(path.join(tmpdir(), "sandboxd-cpu-prof-"));
      try {
        const daemon = await startDaemonProcess(
          ["--workspace", workspace],
          fromSourceWith("--cpu-prof", "--cpu-prof-interval=10", `--cpu-prof-dir=${profiles}`),
        );
        expect(await healthy(daemon)).toBe(true);
        await stopped(daemon);
        expect(daemon.child.exitCode).toBe(0);
        // One per thread that ran JavaScript: the daemon's, and tsx's loader thread here.
        expect(readdirSync(profiles).filter((name) => name.endsWith(".cpuprofile")).length).toBeGreaterThanOrEqual(1);
      } finally {
        rmSync(profiles, { recursive: true, force: true });
      }
    }
  });

  it("keeps a young generation size set in NODE_OPTIONS (Node applies it before the command line's)", async () => {
    await withDaemon(
      { ...daemonFromSource, env: { ...process.env, NODE_OPTIONS: "--max-semi-space-size=8" } },
      (argv) => {
        expect(argv).toContain("--initial-old-space-size=64");
        expect(argv.filter((argument) => argument.startsWith("--max-semi-space-size"))).toEqual([]);
      },
    );
  });

  it("keeps an initial heap size the operator chose", async () => {
    await withDaemon(fromSourceWith("--initial-old-space-size=96"), (argv) => {
      expect(argv).toContain("--initial-old-space-size=96");
      expect(argv.filter((argument) => argument.startsWith("--initial-old-space-size"))).toHaveLength(1);
    });
  });

  it("npm start's script restarts itself with them before the daemon loads", async () => {
    await withDaemon({ file: process.execPath, args: ["scripts/start.mjs"] }, (argv) => {
      for (const flag of daemonNodeFlags) expect(argv).toContain(flag);
      expect(argv.some((argument) => argument.endsWith("scripts/start.mjs"))).toBe(true);
    });
  });

  it("does not restart when told not to, or when a restart would lose the IPC channel of a forked daemon", async () => {
    for (const command of [
      { ...daemonFromSource, env: { ...process.env, SANDBOXD_NO_RELAUNCH: "1" } },
      { ...daemonFromSource, ipc: true },
    ]) {
      await withDaemon(command, (argv, daemon) => {
        for (const flag of daemonNodeFlags) expect(argv).not.toContain(flag);
        if (command.ipc === true) expect(daemon.child.connected).toBe(true);
      });
    }
  });

  it("runs without them when the native addon is not there to restart it", async () => {
    await withDaemon({ ...daemonFromSource, env: { ...process.env, SANDBOXD_NO_ADDON: "1" } }, (argv) => {
      for (const flag of daemonNodeFlags) expect(argv).not.toContain(flag);
    });
  });
});
