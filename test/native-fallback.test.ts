import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { waitFor } from "./support/processes.js";
import { collectExec, ProcessStatus } from "./support/rpc.js";

const root = path.resolve(import.meta.dirname, "..");

/** Both ways of starting commands: the addon's posix_spawn, and child_process where it is missing (no terminals then). */
for (const variant of [
  { name: "with the addon", env: {} as Record<string, string>, warns: false },
  { name: "without the addon (SANDBOXD_NO_ADDON=1)", env: { SANDBOXD_NO_ADDON: "1" }, warns: true },
]) {
  describe(`a daemon ${variant.name}`, () => {
    let daemon: ChildProcess;
    let stderr = "";
    let session: Http2SessionManager;
    let client: ReturnType<typeof createClient<typeof SandboxService>>;
    let workspace: string;
    beforeAll(async () => {
      workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-fallback-")));
      daemon = spawn(
        process.execPath,
        ["--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--workspace", workspace],
        {
          cwd: root,
          env: { ...process.env, ...variant.env },
          stdio: ["ignore", "ignore", "pipe"],
        },
      );
      daemon.stderr!.on("data", (data: Buffer) => (stderr += data.toString()));
      const url = (await waitFor(() => /listening on (\S+)/.exec(stderr)?.[1], {
        timeoutMs: 30_000,
        what: "the daemon to listen",
      })) as string;
      await waitFor(() => stderr.includes("commands run as"), { what: "the start line" });
      session = new Http2SessionManager(url);
      client = createClient(SandboxService, createGrpcTransport({ baseUrl: url, sessionManager: session }));
    });
    afterAll(() => {
      session?.abort();
      daemon?.kill("SIGKILL");
      rmSync(workspace, { recursive: true, force: true });
    });

    it("runs pipe and PTY commands, with stdin, in sessions of their own; says at start whether it forks", async () => {
      expect(stderr.includes("the native addon (build/sandboxd.node) is not loaded")).toBe(variant.warns);
      const piped = await collectExec(client, {
        command: "echo out; echo err >&2; cat; ps -o sid= -o pgid= -p $$",
        stdinData: Buffer.from("in\n"),
      });
      const [sid, pgid] = piped.stdout.toString().trim().split("\n").at(-1)!.trim().split(/\s+/).map(Number);
      expect(piped.stdout.toString().split("\n").slice(0, 2)).toEqual(["out", "in"]);
      expect(piped.stderr.toString()).toBe("err\n");
      expect(sid).toBe(piped.started.pid);
      expect(pgid).toBe(piped.started.pid);
      if (variant.warns) {
        // Only the addon opens terminals: without it a PTY command cannot start, and says what is missing.
        const terminal = await collectExec(client, { command: "tty", pty: { cols: 90, rows: 33 } });
        expect(terminal.exited.status).toBe(ProcessStatus.ERROR);
        expect(terminal.exited.exitCode).toBe(126);
        expect(terminal.exited.error).toMatch(/terminal commands need the native addon/);
      } else {
        const terminal = await collectExec(client, { command: "tty; stty size; exit 4", pty: { cols: 90, rows: 33 } });
        expect(terminal.stdout.toString()).toMatch(/^\/dev\/pts\/\d+\r\n33 90\r\n$/);
        expect(terminal.exited.exitCode).toBe(4);
      }
      const missing = await collectExec(client, { command: "no-such-program-here", args: ["x"] });
      expect(missing.exited.exitCode).toBe(127);
    });
  });
}
