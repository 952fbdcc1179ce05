// The container image's configuration, run on this machine without a container engine: the Dockerfile's user,
// environment and entrypoint chain (an init holding the container's environment, then the daemon), with the token
// in that environment as `docker run -e SANDBOXD_TOKEN=...` gives it. A command then looks for the token everywhere
// in /proc and tries to signal the daemon and the processes above it. test/side/image.sh checks the same in the
// image itself; this is the fast regression.
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { connect } from "../src/client/index.js";
import { bundleDaemon } from "./support/daemon-bundle.js";
import { startDaemonProcess } from "./support/daemon-process.js";
import { waitFor } from "./support/processes.js";
import { tokenProbeArgs, type TokenProbeReport } from "./support/token-probe.js";
import { repositoryRoot } from "./support/tools.js";

/** The final stage of the Dockerfile: its USER, ENV and ENTRYPOINT. */
function runtimeStage(): { user: string; env: Record<string, string>; entrypoint: string[] } {
  const text = readFileSync(path.join(repositoryRoot, "Dockerfile"), "utf8").replace(/\\\n\s*/g, " ");
  const stage = text.slice(text.lastIndexOf("\nFROM "));
  const lines = stage.split("\n").filter((line) => !line.startsWith("#"));
  const last = (instruction: string) =>
    lines
      .filter((line) => line.startsWith(`${instruction} `))
      .at(-1)
      ?.slice(instruction.length + 1)
      .trim();
  const user = last("USER") ?? "0";
  const env: Record<string, string> = {};
  for (const line of lines.filter((line) => line.startsWith("ENV "))) {
    for (const [, name, value] of line.slice(4).matchAll(/(\w+)=(\S+)/g)) env[name!] = value!;
  }
  const entrypoint = JSON.parse(last("ENTRYPOINT")!) as string[];
  return { user, env, entrypoint };
}

const isRoot = process.getuid?.() === 0;

describe.skipIf(!isRoot)("the image's configuration keeps the token from commands", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0).reverse()) cleanup();
  });

  it("a command finds the token nowhere in /proc and cannot signal the daemon, its init or anything above them", async () => {
    const { user, env, entrypoint } = runtimeStage();
    // tini, then node running the daemon's script: the init holds the container's environment all its life.
    expect(entrypoint.slice(0, 3)).toEqual(["/usr/bin/tini", "--", "node"]);
    const [uid, gid] = user.split(":").map(Number);
    const bundle = await bundleDaemon();
    cleanups.push(() => bundle.remove());
    const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-image-token-")));
    chmodSync(workspace, 0o755);
    cleanups.push(() => rmSync(workspace, { recursive: true, force: true }));
    const token = randomBytes(24).toString("hex");
    const container = Object.entries({ ...env, ...bundle.env, SANDBOXD_TOKEN: token }).map(
      ([name, value]) => `${name}=${value}`,
    );
    // tini's stand-in, as the image's user with only the container's environment: a shell that starts the
    // daemon and waits for it. The image's address, port and workspace give way to this machine's.
    const daemon = await startDaemonProcess(["--host", "127.0.0.1", "--workspace", workspace, "--log-format", "json"], {
      file: "setpriv",
      args: [
        `--reuid=${uid}`,
        `--regid=${gid ?? uid}`,
        "--clear-groups",
        "env",
        "-i",
        ...container,
        "/bin/sh",
        "-c",
        '"$0" "$@" & wait $!',
        process.execPath,
        bundle.script,
      ],
      cwd: workspace,
      detached: true,
    });
    const sandbox = await connect({ baseUrl: daemon.url, token });
    try {
      const probe = await sandbox.exec("node", { args: tokenProbeArgs(token), timeout: 60_000 });
      expect(probe.stderr).toBe("");
      const report = JSON.parse(probe.stdout) as TokenProbeReport;
      // Commands run as another user than the daemon's, and so as another than its init's.
      expect.soft(report.uid).not.toBe(uid);
      expect(report.processes).toBeGreaterThan(2);
      expect.soft(report.found).toEqual([]);
      // The daemon, then the init, then this test and everything above it: the kernel refuses every signal.
      expect(report.ancestors.slice(0, 2).map((process) => process.name)).toEqual(["node", "sh"]);
      expect.soft(report.ancestors.filter((process) => process.signal !== "EPERM")).toEqual([]);
      expect((await sandbox.exec("echo still serving")).stdout).toBe("still serving\n");
      expect(daemon.stderr()).not.toContain("commands run as the daemon's own user");
    } finally {
      await sandbox.close();
      // SIGTERM to the whole group, as `docker stop` reaches the daemon: it drains and removes its cgroups.
      process.kill(-daemon.child.pid!, "SIGTERM");
      await waitFor(() => daemon.child.exitCode !== null || daemon.child.signalCode !== null, {
        timeoutMs: 15_000,
        what: "the init to exit",
      }).catch(() => process.kill(-daemon.child.pid!, "SIGKILL"));
    }
  }, 120_000);
});
