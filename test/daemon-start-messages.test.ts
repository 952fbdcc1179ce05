import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { connect } from "../src/client/index.js";
import { waitFor } from "./support/processes.js";
import { daemonFromSource, startDaemonProcess } from "./support/daemon-process.js";

const isRoot = process.getuid?.() === 0;
const scratch = mkdtempSync(path.join(tmpdir(), "sandboxd-start-"));
// Open to every user, so the directories the tests close are the only barriers.
chmodSync(scratch, 0o755);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Runs the daemon from source with `flags` to its exit; its stderr and exit code. */
function runDaemon(
  flags: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(daemonFromSource.file, [...daemonFromSource.args!, ...flags], {
      cwd: daemonFromSource.cwd,
      env,
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (data: Buffer) => (stderr += data.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the daemon did not stop: ${stderr}`));
    }, 30_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

describe("a daemon that cannot start says why and what fixes it, in one style", () => {
  it("a port in use names --port (not a JSON fatal line with a bare EADDRINUSE)", async () => {
    const taken: Server = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      const { code, stderr } = await runDaemon(["--port", String(port), "--workspace", scratch]);
      expect(code).toBe(1);
      expect(stderr).toBe(
        `sandboxd: cannot listen on 127.0.0.1:${port}: the port is in use (another sandboxd?)\n` +
          "(choose another with --port <n> (0 for any free one), or stop what listens there)\n",
      );
    } finally {
      taken.close();
    }
  });

  it("a bad flag: the same two lines", async () => {
    const { code, stderr } = await runDaemon(["--port", "seventy"]);
    expect(code).toBe(2);
    expect(stderr).toMatch(/^sandboxd: --port .*\n\(sandboxd --help lists the flags\)\n$/);
  });

  it.skipIf(!isRoot)(
    "--user with a workspace that user cannot enter is refused at start, naming the directory",
    async () => {
      const closed = mkdtempSync(path.join(scratch, "closed-"));
      const workspace = path.join(closed, "work");
      mkdirSync(workspace);
      chmodSync(closed, 0o700);
      const tokenFile = path.join(scratch, "token");
      writeFileSync(tokenFile, "a-token-of-the-start-test", { mode: 0o600 });
      const { code, stderr } = await runDaemon([
        "--port",
        "0",
        "--user",
        "nobody",
        "--token-file",
        tokenFile,
        "--workspace",
        workspace,
      ]);
      expect(code).toBe(2);
      expect(stderr).toContain(
        `sandboxd: --user nobody cannot enter the workspace ${workspace}: no search (x) permission on ${closed} (owner uid 0, mode 700)\n`,
      );
      expect(stderr).toContain(
        "(give that user access (chmod, chown, a group), or choose another --workspace or --user)\n",
      );
    },
  );
});

describe("the daemon's lines on a terminal (--log-format pretty)", () => {
  it("start with where it listens, one line per exec, one line for a Ctrl-C that sends two SIGINTs", async () => {
    const daemon = await startDaemonProcess(["--log-format", "pretty", "--workspace", scratch]);
    try {
      const lines = () => daemon.stderr().trimEnd().split("\n");
      expect(lines()[0]).toMatch(/^\[[\d:.]+\] INFO: sandboxd \S+ listening on http:\/\/127\.0\.0\.1:\d+ \(workspace /);
      expect(daemon.stderr()).not.toMatch(/cgroup moves: favordynmods on \(already\)/);
      // The last start-up line (how the daemon is guarded) may still be on its way when the daemon answers.
      await waitFor(() => /INFO: sandboxd: .*commands run as/.test(daemon.stderr()), { what: "the guard line" });
      const before = lines().length;
      const sandbox = await connect({ baseUrl: daemon.url, token: "" });
      await sandbox.exec("true");
      await sandbox.close();
      // The exit line of the command, and nothing for the calls around it.
      await waitFor(() => /process exited/.test(daemon.stderr()), { what: "the exit line" });
      const added = lines().slice(before);
      expect(added).toHaveLength(1);
      expect(added[0]).toMatch(/INFO: process exited \{.*"program":"true".*"exitCode":0/);
      // npm start's Ctrl-C: the terminal's SIGINT and the one npm passes on.
      daemon.child.kill("SIGINT");
      daemon.child.kill("SIGINT");
      await daemon.exited();
      expect(lines().filter((line) => line.includes("SIGINT"))).toHaveLength(1);
    } finally {
      daemon.child.kill("SIGKILL");
    }
  });

  it("JSON for machines keeps a line per call", async () => {
    const daemon = await startDaemonProcess(["--log-format", "json", "--workspace", scratch]);
    try {
      const sandbox = await connect({ baseUrl: daemon.url, token: "" });
      await sandbox.exec("true");
      await sandbox.close();
      await waitFor(() => /"msg":"process exited"/.test(daemon.stderr()), { what: "the exit line" });
      const records = daemon
        .stderr()
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line) as { msg: string; procedure?: string });
      expect(records.filter((record) => record.msg === "call").map((record) => record.procedure)).toEqual(
        expect.arrayContaining(["sandbox.v1.SandboxService/ListProcesses", "sandbox.v1.SandboxService/Exec"]),
      );
      expect(records.some((record) => record.msg === "process started")).toBe(true);
    } finally {
      daemon.child.kill("SIGKILL");
    }
  });
});
