import { chmodSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { Launcher, resolveUser } from "../src/process/index.js";
import { waitFor } from "./support/processes.js";
import { collectExec, sleepMarker, sleepers, waitForExit } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

// Without a pids cgroup (every unprivileged container: the runtime mounts /sys/fs/cgroup read-only), the
// commands of one uid share one RLIMIT_NPROC count: one command holding many processes stopped the others'
// forks. A tracing supervisor per command caps each command by itself.
const traced = Launcher.create({ maxTasksPerCommand: 40, cgroups: false });
const shared = Launcher.create({ maxTasksPerCommand: 40, cgroups: false, traceTasks: false });
const isRoot = process.getuid?.() === 0;
const nobody = 65534;

describe.skipIf(!isRoot || traced.forkLimit(nobody) !== "traced")(
  "per-command task caps without cgroups (a tracing supervisor)",
  () => {
    let test: TestServer | undefined;
    afterEach(async () => {
      await test?.client.killAllProcesses({ signal: "SIGKILL" }).catch(() => {});
      await test?.close();
      test = undefined;
    });

    async function start(launcher: Launcher): Promise<TestServer> {
      test = await startTestServer(
        { launcher, runAs: resolveUser("nobody"), token: "traced-token" },
        { sendToken: true },
      );
      chmodSync(test.workspace, 0o755);
      return test;
    }

    /** One command holds 36 processes of its 40; then four others fork three children each. */
    async function othersForkBesideAHog(launcher: Launcher): Promise<string[]> {
      const server = await start(launcher);
      const marker = sleepMarker();
      await server.client.startProcess({ spec: { command: `for i in $(seq 1 35); do sleep ${marker} & done; wait` } });
      // With one count for the uid, other processes of that user on the machine may keep the hog itself short.
      const hog = await waitFor(() => sleepers(marker).length === 35, { what: "the hog's 35 sleepers" }).catch(
        () => false,
      );
      if (!hog) return [`the hog got ${sleepers(marker).length} of its 35`];
      const results = await Promise.all(
        Array.from({ length: 4 }, () =>
          collectExec(server.client, { command: "sleep 0.05 & sleep 0.05 & sleep 0.05 & wait && echo forked" }),
        ),
      );
      return results.map((result) =>
        result.stdout.toString() === "forked\n" ? "ok" : `${result.exited.exitCode}: ${result.stderr}`,
      );
    }

    it("one command holding most of its cap does not stop the others' forks", async () => {
      expect(await othersForkBesideAHog(traced)).toEqual(["ok", "ok", "ok", "ok"]);
    });

    it.skipIf(shared.forkLimit(nobody) !== "rlimit-nproc")("(RLIMIT_NPROC alone: the others fail)", async () => {
      // The figure the supervisor is there for: the same commands with one count for the uid.
      expect((await othersForkBesideAHog(shared)).filter((result) => result !== "ok").length).toBeGreaterThan(0);
    });

    it("a command cannot have more tasks than its cap: the ones past it die as they are created", async () => {
      const server = await start(traced);
      const marker = sleepMarker();
      // Ended by its timeout, which kills its group, once it has forked what it could.
      const exec = collectExec(server.client, {
        command: `for i in $(seq 1 100); do sleep ${marker} & done; wait`,
        timeoutMs: 3_000,
      });
      let most = 0;
      const settled = exec.then(
        () => true,
        () => true,
      );
      while (!(await Promise.race([settled, new Promise((resolve) => setTimeout(() => resolve(false), 20))]))) {
        most = Math.max(most, sleepers(marker).length);
      }
      expect(most).toBeLessThanOrEqual(39);
      expect(most).toBeGreaterThan(20);
      await waitFor(() => sleepers(marker).length === 0, { what: "the sleepers to be gone" });
      // The daemon still serves, and a command still forks.
      expect((await collectExec(server.client, { command: "sleep 0 & wait; echo alive" })).stdout.toString()).toBe(
        "alive\n",
      );
    });

    it("a SIGTERM to the command is the command's (the supervisor ignores it)", async () => {
      const server = await start(traced);
      const { process: started } = await server.client.startProcess({
        spec: { command: "trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done" },
      });
      const ready = async () =>
        Buffer.from((await server.client.getProcessLogs({ processId: started!.processId })).stdout).toString() ===
        "ready\n";
      await waitFor(ready, { what: "the trap to be set" });
      await server.client.killProcess({ processId: started!.processId, signal: "SIGTERM" });
      const exit = await waitForExit(server.client, started!.processId);
      expect(exit.exitCode).toBe(7);
    });
    it("terminal commands run as before; every command shows its supervisor as its tracer", async () => {
      const server = await start(traced);
      const pty = await collectExec(server.client, {
        command: "sleep 0 & wait; echo pty-forked",
        pty: { cols: 80, rows: 24 },
      });
      expect(pty.stdout.toString()).toContain("pty-forked");
      expect(pty.exited.exitCode).toBe(0);
      // The supervisor of each command traces it: nothing else can (the price of this cap).
      const strace = await collectExec(server.client, { command: "grep TracerPid /proc/self/status" });
      expect(strace.stdout.toString()).toMatch(/TracerPid:\s+[1-9]/);
      expect(traced.forkLimit(0)).toBe("traced");
    });
  },
);
