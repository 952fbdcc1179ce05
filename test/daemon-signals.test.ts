import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { startedByNpm } from "../src/cli/sandboxd/parent-watch.js";
import { connect } from "../src/client/index.js";
import { startDaemonProcess, type DaemonCommand } from "./support/daemon-process.js";
import { isAlive, waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { repositoryRoot } from "./support/tools.js";

/** `npm start`, as README's first command and a Dockerfile's CMD run the daemon: npm, then sh, then node. */
const npmStart: DaemonCommand = { file: "npm", args: ["start", "--silent", "--"], cwd: repositoryRoot };

describe("which starts tie the daemon's life to npm's", () => {
  it("npx/npm exec and this package's npm start do; another package's npm script that starts it does not", () => {
    expect(startedByNpm({ npm_command: "exec", npm_lifecycle_event: "npx", npm_package_name: "my-app" })).toBe(true);
    expect(startedByNpm({ npm_command: "start", npm_lifecycle_event: "start", npm_package_name: "sandboxd" })).toBe(
      true,
    );
    expect(startedByNpm({ npm_command: "run", npm_lifecycle_event: "dev", npm_package_name: "my-app" })).toBe(false);
    expect(startedByNpm({ npm_command: "start", npm_lifecycle_event: "start", npm_package_name: "my-app" })).toBe(
      false,
    );
    expect(startedByNpm({})).toBe(false);
  });
});

describe("a signal to the outermost process reaches the daemon", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });

  it("npm start: Ctrl-C to the whole process group (two SIGINTs reach the daemon) still drains and kills a command deaf to SIGTERM", async () => {
    const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-signals-")));
    cleanups.push(() => rmSync(workspace, { recursive: true, force: true }));
    // Its own process group, as a terminal's foreground job: npm, then the daemon npm execs.
    const daemon = await startDaemonProcess(["--workspace", workspace, "--log-format", "json"], {
      ...npmStart,
      detached: true,
    });
    cleanups.push(() => daemon.child.kill("SIGKILL"));
    const sandbox = await connect({ baseUrl: daemon.url });
    cleanups.push(() => void sandbox.close().catch(() => {}));
    const marker = sleepMarker();
    cleanups.push(() => sleepers(marker).forEach((pid) => process.kill(pid, "SIGKILL")));
    await sandbox.startProcess(`trap '' TERM INT; sleep ${marker}; wait`);
    await waitFor(() => sleepers(marker).length === 1, { what: "the command to run" });
    const pids = sleepers(marker);

    process.kill(-daemon.child.pid!, "SIGINT");
    await daemon.exited();
    // The daemon's shutdown escalates to SIGKILL after its grace period: nothing is left to init.
    await waitFor(() => pids.every((pid) => !isAlive(pid)), {
      timeoutMs: 15_000,
      what: "the command deaf to SIGTERM to be killed",
    });
    expect(daemon.stderr()).toContain("shutting down");
  }, 60_000);

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    it(`npm start: ${signal} to npm's pid ends open calls, kills every command and frees the port`, async () => {
      const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-signals-")));
      cleanups.push(() => rmSync(workspace, { recursive: true, force: true }));
      const daemon = await startDaemonProcess(["--workspace", workspace, "--log-format", "json"], npmStart);
      cleanups.push(() => daemon.child.kill("SIGKILL"));
      const sandbox = await connect({ baseUrl: daemon.url });
      cleanups.push(() => void sandbox.close().catch(() => {}));
      const marker = sleepMarker();
      cleanups.push(() => sleepers(marker).forEach((pid) => process.kill(pid, "SIGKILL")));
      await sandbox.startProcess(`sleep ${marker}`);
      const open = sandbox.exec(`sleep ${marker}`, { timeout: 600_000 });
      await waitFor(() => sleepers(marker).length === 2, { what: "both commands to run" });
      const pids = sleepers(marker);

      process.kill(daemon.child.pid!, signal);
      // The open Exec ends (the daemon says it is going away), it does not hang.
      await expect(open).rejects.toThrow();
      await daemon.exited();
      await waitFor(() => pids.every((pid) => !isAlive(pid)), { timeoutMs: 10_000, what: "the commands to be killed" });
      expect(daemon.stderr()).toContain(`"signal":"${signal}"`);
      await expect(fetch(new URL("/healthz", daemon.url))).rejects.toThrow();
    }, 60_000);
  }
});
