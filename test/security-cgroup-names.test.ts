import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cgroupOwnerGone, createDaemonCgroup, daemonCgroupName } from "../src/process/cgroups/cgroup-names.js";
import { Launcher, processStartTime } from "../src/process/index.js";
import {
  asPidOne,
  canUnsharePid,
  daemonPidsCgroups,
  startDaemonWithClient,
  type DaemonWithClient,
} from "./support/daemon-cgroups.js";
import { waitFor } from "./support/processes.js";
import { collectExec, type SandboxClient } from "./support/rpc.js";

const probe = Launcher.create();
const pidsCgroups = probe.forkLimit() === "cgroup-pids";
probe.close();
/** This test runs in the machine's own pid namespace (the kernel's PROC_PID_INIT_INO), where every process is visible. */
const inInitialPidNamespace = readlinkSync("/proc/self/ns/pid") === "pid:[4026531836]";

describe("a daemon's cgroup names", () => {
  it("are created, never adopted: a name that is there already is skipped", () => {
    // Runs first in this file: this process has made only the probe's names yet (one per hierarchy,
    // fewer than 8), so every name up to the 9th is taken and the next free one is the 10th.
    const parent = mkdtempSync(path.join(tmpdir(), "sandboxd-names-"));
    try {
      for (let n = 0; n < 10; n++) {
        mkdirSync(path.join(parent, daemonCgroupName(n)));
        writeFileSync(path.join(parent, daemonCgroupName(n), "someone-else"), "");
      }
      expect(createDaemonCgroup(parent)).toBe(path.join(parent, daemonCgroupName(10)));
      for (let n = 0; n < 10; n++)
        expect(existsSync(path.join(parent, daemonCgroupName(n), "someone-else"))).toBe(true);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it("tell a live daemon, a dead one and another pid namespace's apart", async () => {
    const own = daemonCgroupName(7);
    const [, namespace, , , token] = own.split(".");
    const exited = spawn("true");
    const deadPid = await new Promise<number>((resolve) => exited.once("exit", () => resolve(exited.pid!)));
    const liveStart = processStartTime(process.ppid)!;
    expect(cgroupOwnerGone(own)).toBe(false);
    expect(cgroupOwnerGone(`sandboxd.${namespace}.${process.ppid}.${liveStart}.${token}.0`)).toBe(false);
    // A pid reused by a process started at another time is not the daemon that named the directory.
    expect(cgroupOwnerGone(`sandboxd.${namespace}.${process.ppid}.${liveStart + 1}.${token}.0`)).toBe(true);
    expect(cgroupOwnerGone(`sandboxd.${namespace}.${deadPid}.12345.${token}.0`)).toBe(true);
    // Another pid namespace's daemon (another container's PID 1): gone only when its whole namespace is, and only
    // a daemon of the machine's own namespace, which sees every process, can tell.
    const other = `sandboxd.${Number(namespace) + 1}.1.12345.${token}.0`;
    expect(cgroupOwnerGone(other, () => new Set([namespace!, String(Number(namespace) + 1)]))).toBe(false);
    expect(cgroupOwnerGone(other, () => undefined)).toBe(false);
    expect(cgroupOwnerGone(other, () => new Set([namespace!]))).toBe(namespace === "4026531836");
    // The old names carry a pid of an unknown namespace: left alone.
    expect(cgroupOwnerGone(`sandboxd.${deadPid}.0`)).toBe(false);
    expect(cgroupOwnerGone("sandboxd.x")).toBe(false);
  });
});

describe.skipIf(!pidsCgroups || !canUnsharePid)(
  "two daemons, each PID 1 of its own pid namespace, in one cgroup",
  () => {
    const cleanups: Array<() => void> = [];
    afterEach(() => {
      for (const cleanup of cleanups.splice(0).reverse()) cleanup();
    });
    async function daemon(wrapper: string[] = []): Promise<DaemonWithClient> {
      const started = await startDaemonWithClient(["--max-tasks", "12"], wrapper);
      cleanups.push(started.close);
      return started;
    }
    /** Runs a command that forks; returns its pids cgroup as it saw it, or its failure. */
    async function forkAndTell(client: SandboxClient): Promise<string> {
      const result = await collectExec(client, {
        command: "sleep 0.01 & sleep 0.01 & wait && sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup",
      });
      return result.exited.exitCode === 0
        ? result.stdout.toString().trim()
        : `failed ${result.exited.exitCode}: ${result.stderr}`;
    }

    it("each start, run and stop in cgroups of their own", async () => {
      const [first, second] = await Promise.all([daemon(asPidOne), daemon(asPidOne)]);
      const [firstCgroup] = daemonPidsCgroups(first.pid);
      const [secondCgroup] = daemonPidsCgroups(second.pid);
      expect(firstCgroup).toBeDefined();
      expect(secondCgroup).toBeDefined();
      expect(firstCgroup).not.toBe(secondCgroup);
      for (let round = 0; round < 3; round++) {
        const [firstSaw, secondSaw] = await Promise.all([forkAndTell(first.client), forkAndTell(second.client)]);
        expect(path.join("/sys/fs/cgroup/pids", firstSaw).startsWith(`${firstCgroup}/`)).toBe(true);
        expect(path.join("/sys/fs/cgroup/pids", secondSaw).startsWith(`${secondCgroup}/`)).toBe(true);
      }
      // One stopping removes its own directory only (unshare ignores SIGTERM: the daemon gets it).
      process.kill(first.pid, "SIGTERM");
      await first.daemon.exited();
      expect(existsSync(firstCgroup!)).toBe(false);
      expect(existsSync(secondCgroup!)).toBe(true);
      expect(path.join("/sys/fs/cgroup/pids", await forkAndTell(second.client)).startsWith(`${secondCgroup}/`)).toBe(
        true,
      );
    });

    it.skipIf(!inInitialPidNamespace)(
      "a daemon of the machine's own pid namespace sweeps what a dead namespace's daemon left, never a live one's",
      async () => {
        const [dead, live] = await Promise.all([daemon(asPidOne), daemon(asPidOne)]);
        const liveSaw = await forkAndTell(live.client);
        await forkAndTell(dead.client);
        const [deadCgroup] = daemonPidsCgroups(dead.pid);
        const [liveCgroup] = daemonPidsCgroups(live.pid);
        // SIGKILL: the daemon cannot remove its directories, and its pid namespace ends with it.
        dead.close();
        await waitFor(() => !existsSync(`/proc/${dead.pid}`), { what: "the killed daemon to be gone" });
        const host = await daemon();
        await waitFor(() => host.daemon.stderr().includes("fork cap"), { what: "the host daemon's start line" });
        expect(existsSync(deadCgroup!)).toBe(false);
        expect(existsSync(liveCgroup!)).toBe(true);
        // The live daemon's kept cgroup is still its own, reused by its next command.
        expect(await forkAndTell(live.client)).toBe(liveSaw);
      },
    );

    it("a daemon starting in a pid namespace of its own leaves a live daemon's cgroups outside it alone", async () => {
      const outside = await daemon();
      // The outside daemon's command cgroup, kept empty for its next command once this one ends.
      const used = await forkAndTell(outside.client);
      const directory = path.join("/sys/fs/cgroup/pids", used);
      await waitFor(() => existsSync(directory) && readFileSync(path.join(directory, "cgroup.procs"), "utf8") === "", {
        what: "the outside daemon's cgroup to be free",
      });
      // Its start sweeps the cgroups of daemons it can tell are dead; the outside daemon's pid means
      // nothing in its namespace (its /proc does not show it).
      const inside = await daemon(asPidOne);
      await waitFor(() => inside.daemon.stderr().includes("fork cap"), { what: "the inside daemon's start line" });
      expect(existsSync(directory)).toBe(true);
      expect(await forkAndTell(outside.client)).toBe(used);
    });
  },
);
