import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Launcher, loadNativeAddon } from "../src/process/index.js";
import { collectExec } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { repositoryRoot } from "./support/tools.js";

const probe = Launcher.create();
const commandCgroups = probe.resources !== undefined;
probe.close();
const addon = loadNativeAddon();
const whyNot = !commandCgroups
  ? "no writable cgroup for commands here (not root, or a read-only /sys/fs/cgroup)"
  : addon?.spawnJoinsCgroups !== true
    ? "the native addon is not built"
    : undefined;
if (whyNot !== undefined) console.warn(`cgroup-join-at-spawn: skipped: ${whyNot}`);

/**
 * A process of its own (fds are per process, and fds the test runner inherited would send every
 * command through the helper) that prints the plans of a command on pipes and of one in a PTY.
 */
const planScript = `
import { closeSync, readdirSync, readFileSync } from "node:fs";
for (const entry of readdirSync("/proc/self/fd")) {
  const fd = Number(entry);
  if (fd <= 2) continue;
  let info;
  try { info = readFileSync("/proc/self/fdinfo/" + fd, "utf8"); } catch { continue; }
  if ((parseInt(/flags:\\s+(\\d+)/.exec(info)[1], 8) & 0o2000000) === 0) closeSync(fd);
}
const { Launcher } = await import("./src/process/spawn/index.ts");
const launcher = Launcher.create({ joinAtSpawn: true });
const request = { file: "/bin/cat", args: ["/proc/self/cgroup"], env: {}, cwd: "/", pty: false, cwdIsRoot: true };
const direct = launcher.plan(request, undefined);
const terminal = launcher.plan({ ...request, pty: true }, undefined);
await Promise.all([direct.release(), terminal.release()]);
launcher.close();
process.stdout.write(JSON.stringify({
  direct: { file: direct.file, args: direct.args, joinCgroups: direct.joinCgroups, procsFiles: direct.cgroup?.procsFiles },
  terminal: { file: terminal.file, joinCgroups: terminal.joinCgroups },
  helper: launcher.helper,
}));
`;

/** Runs an ES module script with tsx in the repository and resolves with its stdout; rejects on a failure. */
function runNode(script: string): Promise<string> {
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    cwd: repositoryRoot,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (data: Buffer) => (stdout += data));
  child.stderr.on("data", (data: Buffer) => (stderr += data));
  return new Promise((resolve, reject) =>
    child.once("close", (code) => (code === 0 ? resolve(stdout) : reject(new Error(`exit ${code}: ${stderr}`)))),
  );
}

/** The memory controller's line of a /proc/<pid>/cgroup text (v1), or the unified one (v2). */
function memoryCgroup(text: string): string {
  const lines = text.trim().split("\n");
  const line =
    lines.find((entry) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(entry)) ??
    lines.find((entry) => entry.startsWith("0::"));
  return line!.slice(line!.lastIndexOf(":") + 1);
}

describe.skipIf(whyNot !== undefined)("a command joins its own cgroups as it is spawned", () => {
  const servers: TestServer[] = [];
  beforeAll(async () => {
    servers.push(await startTestServer({ launcher: Launcher.create({ joinAtSpawn: true }) }));
    servers.push(await startTestServer({ launcher: Launcher.create({ joinAtSpawn: false }) }));
  });
  afterAll(async () => {
    for (const server of servers) await server.close();
  });

  it("plans one exec for a command on pipes, the helper's for a PTY one", async () => {
    const plans = JSON.parse(await runNode(planScript)) as {
      direct: { file: string; args: string[]; joinCgroups?: string[]; procsFiles: string[] };
      terminal: { file: string; joinCgroups?: string[] };
      helper: string;
    };
    expect(plans.direct.file).toBe("/bin/cat");
    expect(plans.direct.args).toEqual(["/proc/self/cgroup"]);
    expect(plans.direct.joinCgroups?.length).toBeGreaterThan(0);
    // Its own cgroups, and a pids cgroup of its own where that is apart from them.
    expect(plans.direct.joinCgroups).toEqual(expect.arrayContaining(plans.direct.procsFiles));
    expect(plans.terminal.joinCgroups).toBeUndefined();
    expect(plans.terminal.file).toBe(plans.helper);
  });

  it("runs its first instruction in its own memory cgroup, as through the helper", async () => {
    const daemons = memoryCgroup(readFileSync("/proc/self/cgroup", "utf8"));
    for (const server of servers) {
      const result = await collectExec(server.client, { command: "cat", args: ["/proc/self/cgroup"] });
      expect(result.exited.exitCode).toBe(0);
      const own = memoryCgroup(result.stdout.toString());
      // Below the daemon's own cgroup, in a directory of the command's.
      expect(own.startsWith(`${daemons === "/" ? "" : daemons}/`)).toBe(true);
      expect(own).not.toBe(daemons);
    }
  });

  it("reports the step that failed: a cgroup it could not join, a working directory it could not enter", async () => {
    const spawn = (options: { cwd?: string; cgroups: string[] }) =>
      addon!.spawnAsync("/bin/true", ["true"], [], { stdin: false, statusFd: false, ...options });
    await expect(spawn({ cgroups: ["/nonexistent/cgroup.procs"] })).rejects.toMatchObject({
      code: "ENOENT",
      syscall: "cgroup",
    });
    await expect(spawn({ cgroups: ["/proc/self/cgroup"], cwd: "/" })).rejects.toMatchObject({ syscall: "cgroup" });
    // No cgroup to join, the same child code: its chdir fails.
    await expect(spawn({ cgroups: [], cwd: "/nonexistent" })).rejects.toMatchObject({
      code: "ENOENT",
      syscall: "chdir",
    });
  });
});
