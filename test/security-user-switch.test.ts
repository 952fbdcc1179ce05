import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { resolveUser } from "../src/process/index.js";
import { startServer } from "../src/server/index.js";
import { groupMembers, waitFor } from "./support/processes.js";
import { Code, collectExec } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const isRoot = process.getuid?.() === 0;
const root = path.resolve(import.meta.dirname, "..");
const token = "user-switch-token";

/**
 * A shared library whose constructor appends "<uid> <euid> <program>" to the file named by
 * PRELOAD_LOG: loaded through LD_PRELOAD, it shows every process that ran with the client's
 * environment, and as whom.
 */
const preloadSource = `
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void record(void) {
  const char *log = getenv("PRELOAD_LOG");
  if (log == NULL) return;
  char exe[256] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) exe[n] = 0;
  int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0666);
  if (fd < 0) return;
  dprintf(fd, "%d %d %s\\n", (int)getuid(), (int)geteuid(), exe);
  close(fd);
}
`;

describe.skipIf(!isRoot)("--user: nothing runs as root with the client's environment", () => {
  let directory: string;
  let library: string;
  let test: TestServer | undefined;

  beforeAll(() => {
    directory = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-preload-")));
    chmodSync(directory, 0o755);
    writeFileSync(path.join(directory, "record.c"), preloadSource);
    library = path.join(directory, "record.so");
    execFileSync("cc", ["-shared", "-fPIC", "-o", library, path.join(directory, "record.c")]);
  });
  afterAll(() => rmSync(directory, { recursive: true, force: true }));
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  const forms = [
    { name: "a shell command on pipes", spec: { command: "true" } },
    { name: "an argv command on pipes", spec: { command: "true", args: ["x"] } },
    { name: "a shell command in a PTY", spec: { command: "true", pty: {} } },
    { name: "an argv command in a PTY", spec: { command: "true", args: ["x"], pty: {} } },
  ];
  for (const form of forms) {
    it(`LD_PRELOAD from the request loads only as the user, for ${form.name}`, async () => {
      const nobody = resolveUser("nobody");
      test ??= await startTestServer({ runAs: nobody, token }, { sendToken: true });
      chmodSync(test.workspace, 0o755);
      const log = path.join(directory, `${form.name.replaceAll(" ", "-")}.log`);
      writeFileSync(log, "");
      chmodSync(log, 0o666);
      const env = { LD_PRELOAD: library, PRELOAD_LOG: log, LD_LIBRARY_PATH: directory, GCONV_PATH: directory };
      const result = await collectExec(test.client, { ...form.spec, env });
      expect(result.exited.exitCode).toBe(0);
      const lines = readFileSync(log, "utf8").trim().split("\n").filter(Boolean);
      // The command itself loaded it, as the user: the preload works, so its absence elsewhere counts.
      expect(lines.length).toBeGreaterThan(0);
      for (const line of lines) expect(line).toMatch(new RegExp(`^${nobody.uid} ${nobody.uid} `));
    });
  }

  it("gives the PTY to the user, so the command can write to its own terminal", async () => {
    test = await startTestServer({ runAs: resolveUser("nobody"), token }, { sendToken: true });
    chmodSync(test.workspace, 0o755);
    const result = await collectExec(test.client, {
      command: 'stat -c %U "$(tty)"; echo mine > "$(tty)" && echo wrote',
      pty: {},
    });
    expect(result.stdout.toString().replaceAll("\r", "")).toBe("nobody\nmine\nwrote\n");
  });
});

describe("--user and --allow-sudo need a token", () => {
  it("refuses to start without one, saying why", async () => {
    const nobody = resolveUser("nobody");
    await expect(startServer({ port: 0, runAs: nobody })).rejects.toThrow(
      /refusing --user nobody without a token: any command could call the daemon back/,
    );
    await expect(startServer({ port: 0, allowSudo: true })).rejects.toThrow(/refusing --allow-sudo without a token/);
  });

  it("the command line says so too, and exits non-zero", async () => {
    // A workspace nobody can enter, wherever the checkout is (a clone under a 0700 directory is not).
    const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-user-token-"));
    chmodSync(workspace, 0o777);
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--user", "nobody", "--workspace", workspace],
      {
        cwd: root,
        env: withoutToken(process.env),
        stdio: ["ignore", "ignore", "pipe"],
      },
    );
    let stderr = "";
    child.stderr!.on("data", (data: Buffer) => (stderr += data.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    rmSync(workspace, { recursive: true, force: true });
    expect(code).not.toBe(0);
    expect(stderr).toContain("refusing --user nobody without a token");
  });
});

describe.skipIf(!isRoot)("fds the daemon inherited never reach a command", () => {
  let daemon: ChildProcess | undefined;
  let session: Http2SessionManager | undefined;
  let secretDirectory: string | undefined;
  afterEach(() => {
    session?.abort();
    daemon?.kill("SIGKILL");
    if (secretDirectory !== undefined) rmSync(secretDirectory, { recursive: true, force: true });
  });

  it("a root-only file open on fd 200 of the daemon is not readable by a --user command", async () => {
    secretDirectory = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-fd-")));
    const secret = path.join(secretDirectory, "secret");
    writeFileSync(secret, "root only\n", { mode: 0o600 });
    const workspace = path.join(secretDirectory, "workspace");
    mkdirSync(workspace, { mode: 0o755 });
    chmodSync(secretDirectory, 0o755);
    const fd = openSync(secret, "r");
    const stdio: Array<"ignore" | "pipe" | number> = ["ignore", "ignore", "pipe"];
    while (stdio.length < 200) stdio.push("ignore");
    stdio.push(fd);
    daemon = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--user", "nobody", "--workspace", workspace],
      {
        cwd: root,
        env: { ...process.env, SANDBOXD_TOKEN: token },
        stdio,
      },
    );
    closeSync(fd);
    let stderr = "";
    daemon.stderr!.on("data", (data: Buffer) => (stderr += data.toString()));
    const url = (await waitFor(() => /listening on (\S+)/.exec(stderr)?.[1], {
      timeoutMs: 30_000,
      what: "the daemon to listen",
    })) as string;
    // The daemon itself does hold it: the test would prove nothing otherwise.
    expect(readFileSync(`/proc/${daemon.pid}/fd/200`, "utf8")).toBe("root only\n");
    session = new Http2SessionManager(url);
    const withToken: Interceptor = (next) => (request) => (
      request.header.set("authorization", `Bearer ${token}`), next(request)
    );
    const client = createClient(
      SandboxService,
      createGrpcTransport({ baseUrl: url, sessionManager: session, interceptors: [withToken] }),
    );
    for (const pty of [undefined, {}]) {
      const result = await collectExec(client, {
        command: "ls /proc/self/fd | sort -n | tr '\\n' ' '; cat <&200",
        pty,
      });
      const output = result.stdout.toString() + result.stderr.toString();
      expect(output).not.toContain("root only");
      expect(
        output
          .split("\n")[0]
          .trim()
          .split(" ")
          .map(Number)
          .filter((n) => n > 3),
      ).toEqual([]);
    }
  });
});

describe("the working directory is entered as checked", () => {
  let test: TestServer | undefined;
  let flipper: ChildProcess | undefined;
  afterEach(async () => {
    if (flipper?.pid !== undefined) {
      // The whole group: a mv or ln the shell started would otherwise go on writing into the workspace
      // while it is removed (ENOTEMPTY).
      const group = flipper.pid;
      try {
        process.kill(-group, "SIGKILL");
      } catch {
        // Gone already.
      }
      await waitFor(() => groupMembers(group).length === 0, { what: "the flipper's processes to end" });
      flipper = undefined;
    }
    await test?.close();
    test = undefined;
  });

  it("a path flipping between a directory and a symlink out never runs a command outside, and fails with the right codes", async () => {
    test = await startTestServer();
    const workspace = test.workspace;
    mkdirSync(path.join(workspace, "real"));
    // flip is, in turn, a directory inside, missing, a symlink to /etc, missing.
    flipper = spawn("/bin/sh", ["-c", "while :; do mv -T real flip; mv -T flip real; ln -s /etc flip; rm flip; done"], {
      cwd: workspace,
      stdio: "ignore",
      detached: true,
    });
    const outside: string[] = [];
    const codes = new Map<string, number>();
    const deadline = Date.now() + 20_000;
    let ran = 0;
    for (let i = 0; i < 1000 && Date.now() < deadline; i++) {
      try {
        const result = await collectExec(test.client, { command: "pwd -P", cwd: "flip" });
        ran++;
        expect(result.exited.exitCode).toBe(0);
        const where = result.stdout.toString().trim();
        if (!where.startsWith(workspace)) outside.push(where);
      } catch (error) {
        const code = Code[(error as { code: Code }).code];
        codes.set(code, (codes.get(code) ?? 0) + 1);
      }
    }
    expect(outside).toEqual([]);
    expect(ran).toBeGreaterThan(0);
    expect([...codes.keys()].filter((code) => code !== "PermissionDenied" && code !== "FailedPrecondition")).toEqual(
      [],
    );
  });
});

function withoutToken(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const copy = { ...env };
  delete copy.SANDBOXD_TOKEN;
  return copy;
}
