import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { Launcher, PidsCgroup } from "../src/process/index.js";
import {
  asPidOne,
  canUnsharePid,
  daemonPidsCgroups,
  startDaemonWithClient,
  tasksCharged,
  zombieChildren,
  type DaemonWithClient,
} from "./support/daemon-cgroups.js";
import { waitFor } from "./support/processes.js";
import { collectExec, type SandboxClient } from "./support/rpc.js";

const probe = Launcher.create();
/** Per-command pids cgroups can be made here (root, a writable pids controller). */
const pidsCgroups = probe.forkLimit() === "cgroup-pids";
probe.close();

/** A command that leaves orphans: ten that run on (killed with its cgroup as it ends) and ten that exit at once. */
const poisoner = "for i in 1 2 3 4 5 6 7 8 9 10; do (sleep 30 &); (true &); done; sleep 0.2; echo left";
/** A command that needs four tasks at once (itself and three children). */
const forker = "sleep 0.01 & sleep 0.01 & sleep 0.01 & wait; echo forked";

/** The one pids cgroup a daemon made for its commands. */
function daemonPidsCgroup(daemonPid: number): string {
  const found = daemonPidsCgroups(daemonPid);
  expect(found).toHaveLength(1);
  return found[0]!;
}

describe.skipIf(!pidsCgroups)("what commands leave behind never stops the next ones from forking", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0).reverse()) cleanup();
  });

  async function daemon(flags: string[], wrapper: string[] = []): Promise<DaemonWithClient> {
    const started = await startDaemonWithClient(flags, wrapper);
    cleanups.push(started.close);
    return started;
  }

  /** Runs the poisoner, then `count` forkers; returns the forkers' outputs that are not "forked". */
  async function poisonThenFork(client: SandboxClient, rounds: number, count: number): Promise<string[]> {
    const failures: string[] = [];
    for (let round = 0; round < rounds; round++) {
      const poisoned = await collectExec(client, { command: poisoner });
      if (poisoned.stdout.toString() !== "left\n")
        failures.push(`poisoner ${poisoned.exited.exitCode}: ${poisoned.stderr}`);
      for (let index = 0; index < count; index++) {
        const result = await collectExec(client, { command: forker });
        if (result.stdout.toString() !== "forked\n" || result.exited.exitCode !== 0)
          failures.push(`${result.exited.exitCode}: ${result.stderr}`);
      }
    }
    return failures;
  }

  it("commands after one that left double-forked orphans (zombies once they exit) all fork", async () => {
    // 12 tasks a command: the poisoner's 10 orphans, were they still charged, would leave 2.
    const { client, pid } = await daemon(["--max-tasks", "12"]);
    const failures = await poisonThenFork(client, 3, 10);
    expect(failures).toEqual([]);
    // The daemon reaps the orphans it was given: no zombie of theirs stays its child.
    await waitFor(() => zombieChildren(pid).length === 0, { what: "the orphans to be reaped" });
    await waitFor(() => tasksCharged(daemonPidsCgroup(pid)) === 0, { what: "nothing charged to the commands' cgroup" });
  });

  it.skipIf(!canUnsharePid)(
    "the daemon as PID 1 of a pid namespace reaps every orphan: none counts against --max-tasks-total for good",
    async () => {
      // 60 orphans in all across 3 rounds, under a total of 40: kept as zombies, they would fill it.
      const { client, daemon: started, pid } = await daemon(["--max-tasks", "12", "--max-tasks-total", "40"], asPidOne);
      await waitFor(() => started.stderr().includes("orphans reaped by the daemon (PID 1)"), {
        what: "the daemon to say it reaps as PID 1",
      });
      const failures = await poisonThenFork(client, 3, 5);
      expect(failures).toEqual([]);
      await waitFor(() => zombieChildren(pid).length === 0, { what: "the orphans to be reaped by PID 1" });
      await waitFor(() => tasksCharged(daemonPidsCgroup(pid)) === 0, {
        what: "nothing charged to the commands' cgroup",
      });
    },
  );
});

describe.skipIf(!pidsCgroups)("a per-command cgroup with tasks still charged", () => {
  it("is never handed out again: not while its zombie waits, and not after", async () => {
    const cgroup = PidsCgroup.detect()!;
    const { directory, procsFile } = cgroup.create(5);
    // A zombie charged to the cgroup whose parent (sleep) never reaps it: cgroup.procs is empty,
    // pids.current is 1.
    const holder = spawn("/bin/sh", ["-c", `sh -c 'echo $$ > ${procsFile}; exit 0' & exec sleep 60`], {
      stdio: "ignore",
    });
    try {
      await waitFor(() => tasksCharged(directory) === 1 && readFileSync(procsFile, "utf8") === "", {
        what: "a zombie charged to the cgroup",
      });
      await cgroup.remove(directory);
      const handedOut = Array.from({ length: 70 }, () => cgroup.create(5));
      expect(handedOut.map((created) => created.directory)).not.toContain(directory);
      expect(handedOut.every((created) => tasksCharged(created.directory) === 0)).toBe(true);
      await Promise.all(handedOut.map((created) => cgroup.remove(created.directory)));
    } finally {
      holder.kill("SIGKILL");
      cgroup.close();
    }
  });
});
