import { spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { findExecHelper } from "../src/process/native/index.js";
import { waitFor } from "./support/processes.js";
import { collectExec, createUncompressedClient } from "./support/rpc.js";
import { repositoryRoot } from "./support/tools.js";

/**
 * A process of its own (fds are per process) that drops the fds the test runner itself inherited,
 * keeps those named in KEEP_FDS, and prints what the launcher would spawn for a shell command line.
 */
const planScript = `
import { closeSync, readdirSync, readFileSync } from "node:fs";
const keep = new Set((process.env.KEEP_FDS ?? "").split(",").filter(Boolean).map(Number));
for (const entry of readdirSync("/proc/self/fd")) {
  const fd = Number(entry);
  if (fd <= 2 || keep.has(fd)) continue;
  let info;
  try { info = readFileSync("/proc/self/fdinfo/" + fd, "utf8"); } catch { continue; }
  if ((parseInt(/flags:\\s+(\\d+)/.exec(info)[1], 8) & 0o2000000) === 0) closeSync(fd);
}
const { Launcher } = await import("./src/process/spawn/index.ts");
const plan = Launcher.create({ cgroups: false, resources: false, maxTasksPerCommand: 0 }).plan(
  { file: "/bin/sh", args: ["-c", "true"], env: {}, cwd: "/", pty: false, cwdIsRoot: true },
  undefined,
);
process.stdout.write(plan.file);
`;

async function plannedProgram(stdio: StdioOptions, keepFds: string): Promise<string> {
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", planScript], {
    cwd: repositoryRoot,
    env: { ...process.env, KEEP_FDS: keepFds },
    stdio,
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (data: Buffer) => (stdout += data.toString()));
  child.stderr!.on("data", (data: Buffer) => (stderr += data.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  expect(code, stderr).toBe(0);
  return stdout;
}

describe.skipIf(findExecHelper() === undefined)("the launcher and the fds its process inherited", () => {
  it("starts a shell command line without the helper when no fd was inherited", async () => {
    // Before: the listing's own directory fd, gone by the time its flags were read, counted as
    // inherited, so every command went through the helper (an exec more each).
    expect(await plannedProgram(["ignore", "pipe", "pipe"], "")).toBe("/bin/sh");
  }, 60_000);

  it("goes through the helper, which closes it, when an fd was inherited", async () => {
    const fd = openSync(import.meta.filename, "r");
    try {
      const stdio: Array<"ignore" | "pipe" | number> = ["ignore", "pipe", "pipe"];
      while (stdio.length < 200) stdio.push("ignore");
      stdio.push(fd);
      expect(await plannedProgram(stdio, "200")).toBe(findExecHelper());
    } finally {
      closeSync(fd);
    }
  }, 60_000);
});

describe("an fd the daemon inherited", () => {
  let daemon: ChildProcess | undefined;
  let close: (() => void) | undefined;
  let directory: string | undefined;
  afterEach(() => {
    close?.();
    daemon?.kill("SIGKILL");
    if (directory !== undefined) rmSync(directory, { recursive: true, force: true });
  });

  it("stays open in the daemon, close-on-exec, and reaches no command", async () => {
    directory = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-inherited-")));
    const file = path.join(directory, "inherited");
    writeFileSync(file, "inherited by the daemon\n");
    const fd = openSync(file, "r");
    const stdio: Array<"ignore" | "pipe" | number> = ["ignore", "ignore", "pipe"];
    while (stdio.length < 200) stdio.push("ignore");
    stdio.push(fd);
    daemon = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--workspace", directory],
      { cwd: repositoryRoot, stdio },
    );
    closeSync(fd);
    let stderr = "";
    daemon.stderr!.on("data", (data: Buffer) => (stderr += data.toString()));
    const url = (await waitFor(() => /listening on (\S+)/.exec(stderr)?.[1], {
      timeoutMs: 30_000,
      what: "the daemon to listen",
    })) as string;
    // Still the daemon's (nothing it did not open is closed under it), but close-on-exec.
    expect(readFileSync(`/proc/${daemon.pid}/fd/200`, "utf8")).toBe("inherited by the daemon\n");
    const flags = /^flags:\s+(\d+)/m.exec(readFileSync(`/proc/${daemon.pid}/fdinfo/200`, "utf8"))![1];
    expect(parseInt(flags, 8) & 0o2000000).not.toBe(0);
    const connection = createUncompressedClient(url);
    close = connection.close;
    for (const pty of [undefined, {}]) {
      const result = await collectExec(connection.client, {
        command: "ls /proc/self/fd | sort -n | tr '\\n' ' '; cat <&200",
        pty,
      });
      const output = result.stdout.toString() + result.stderr.toString();
      expect(output).not.toContain("inherited by the daemon");
      // fd 3 is ls's own listing.
      const fds = output.split("\n")[0].trim().split(" ").map(Number);
      expect(fds.filter((n) => n > 3)).toEqual([]);
    }
  }, 90_000);
});
