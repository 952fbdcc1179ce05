import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collect, runCli, spawnCli } from "./support/cli.js";
import { isAlive, waitFor } from "./support/processes.js";
import { sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

/** Runs `sandbox exec` against the test daemon. */
const exec = (args: readonly string[], options: { input?: string | Buffer; env?: NodeJS.ProcessEnv } = {}) =>
  runCli(["exec", ...args], { url: t.server.url, ...options });

/** Asserts that stderr is exactly one `sandbox: ...` line matching `pattern`. */
function expectOneLine(stderr: Buffer, pattern: RegExp): void {
  const text = stderr.toString();
  expect(text).toMatch(/^sandbox: [^\n]+\n$/);
  expect(text).toMatch(pattern);
}

describe("sandbox exec without a terminal", () => {
  it("puts the command's stdout and stderr on its own stdout and stderr, byte for byte", async () => {
    const bytes = randomBytes(300_000);
    writeFileSync(path.join(t.workspace, "blob.bin"), bytes);
    const result = await exec(["--", "sh", "-c", "cat blob.bin; cat blob.bin >&2; printf tail >&2"]);
    expect(result.code).toBe(0);
    expect(result.stdout.equals(bytes)).toBe(true);
    expect(result.stderr.equals(Buffer.concat([bytes, Buffer.from("tail")]))).toBe(true);
  });

  it("exits with the command's exit code, and 128 + n when signal n ended it", async () => {
    expect((await exec(["--", "sh", "-c", "exit 3"])).code).toBe(3);
    expect((await exec(["--", "sh", "-c", "exit 0"])).code).toBe(0);
    const terminated = await exec(["--", "sh", "-c", "kill -TERM $$"]);
    expect(terminated.code).toBe(143);
    expect(terminated.stderr.toString()).toBe("");
    expect((await exec(["--", "sh", "-c", "kill -KILL $$"])).code).toBe(137);
  });

  it("says in one line why the command ended when something else killed it (another client's kill-all); -o json says the cause", async () => {
    const marker = `1000.${Date.now()}`;
    const running = runCli(["exec", "--", "sleep", marker], { url: t.server.url });
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep" });
    expect((await t.client.killAllProcesses({ signal: "SIGTERM" })).killedCount).toBeGreaterThanOrEqual(1);
    const killed = await running;
    expect(killed.code).toBe(143);
    expectOneLine(killed.stderr, /^sandbox: killed on request \(kill_all\) \(SIGTERM\)\n$/);
    const json = await exec(["-o", "json", "--", "sh", "-c", "kill -TERM $$"]);
    expect(JSON.parse(json.stdout.toString())).toMatchObject({ exitCode: 143, signal: "SIGTERM", cause: "signaled" });
  });

  it("runs one argument as a shell command line, several as argv, and stops reading flags at the command", async () => {
    expect((await exec(["--", "echo a | tr a b"])).stdout.toString()).toBe("b\n");
    expect((await exec(["--", "printf", "%s|", "a b", "$HOME"])).stdout.toString()).toBe("a b|$HOME|");
    // No `--`: everything from the command on is the command's, flags included, as `docker exec` reads it.
    expect((await exec(["sh", "-c", 'echo "$0 $1"', "-x", "-it"])).stdout.toString()).toBe("-x -it\n");
  });

  it("says so in one line and exits 127 when the program is not found", async () => {
    const result = await exec(["--", "no-such-program-cli-test", "arg"]);
    expect(result.code).toBe(127);
    expectOneLine(result.stderr, /program not found: no-such-program-cli-test/);
  });

  it("sets environment variables (-e) and the working directory (-w)", async () => {
    mkdirSync(path.join(t.workspace, "sub"), { recursive: true });
    const result = await exec([
      "-e",
      "GREETING=hello world",
      "-e",
      "EMPTY=",
      "-w",
      "sub",
      "--",
      "sh",
      "-c",
      'echo "$GREETING|${EMPTY-unset}|$(pwd)"',
    ]);
    expect(result.stdout.toString()).toBe(`hello world||${path.join(t.workspace, "sub")}\n`);
    const passed = await exec(["-e", "FROM_HERE", "--", "sh", "-c", 'echo "$FROM_HERE"'], {
      env: { FROM_HERE: "local value" },
    });
    expect(passed.stdout.toString()).toBe("local value\n");
  });

  it("refuses a working directory outside the workspace in one line, exit 125", async () => {
    const result = await exec(["-w", "/etc", "--", "true"]);
    expect(result.code).toBe(125);
    expectOneLine(result.stderr, /outside the workspace/);
  });

  it("kills the command after --timeout: exit 137 and a line saying why", async () => {
    const started = Date.now();
    const result = await exec(["--timeout", "1s", "--", "sleep", "600"]);
    expect(result.code).toBe(137);
    expectOneLine(result.stderr, /ran past --timeout/);
    // Killed, not waited for: far sooner than the command's own end, however busy the machine.
    expect(Date.now() - started).toBeLessThan(120_000);
  });

  it("rejects a malformed --timeout as a usage error, exit 125", async () => {
    const result = await exec(["--timeout", "5 minutes", "--", "true"]);
    expect(result.code).toBe(125);
    expectOneLine(result.stderr, /--timeout.*not a duration/);
  });

  it("with -i passes piped stdin through byte for byte and passes its end on", async () => {
    const bytes = randomBytes(2 * 1024 * 1024 + 7);
    const result = await exec(["-i", "--", "cat"], { input: bytes });
    expect(result.code).toBe(0);
    expect(result.stdout.equals(bytes)).toBe(true);
    const counted = await exec(["-i", "--", "wc", "-l"], { input: "one\ntwo\nthree\n" });
    expect(counted.stdout.toString().trim()).toBe("3");
  });

  it("without -i gives the command no stdin: it reads end of file at once", async () => {
    const result = await exec(["--", "cat"], { input: "not for the command\n" });
    expect(result.code).toBe(0);
    expect(result.stdout.toString()).toBe("");
  });

  it("refuses -it when stdin is not a terminal, in one line, exit 125", async () => {
    const result = await exec(["-it", "--", "sh"]);
    expect(result.code).toBe(125);
    expectOneLine(result.stderr, /not a TTY/);
  });

  it("passes Ctrl-C (SIGINT) on to the command once, and exits with the command's code", async () => {
    const { child, done, printed } = startCli([
      "exec",
      "--",
      "sh",
      "-c",
      'trap "echo got INT; exit 5" INT; echo ready; while :; do sleep 0.1; done',
    ]);
    await waitFor(() => printed().includes("ready"), { what: "the command to start" });
    child.kill("SIGINT");
    const result = await done;
    expect(result.code).toBe(5);
    expect(result.stdout.toString()).toBe("ready\ngot INT\n");
  });

  it("on SIGTERM abandons the command, which the daemon kills, and exits 143", async () => {
    const { child, done, printed } = startCli([
      "exec",
      "--",
      "sh",
      "-c",
      "echo $$; trap '' INT TERM; while :; do sleep 0.1; done",
    ]);
    const pid = Number(await waitFor(() => /^(\d+)\n/.exec(printed())?.[1], { what: "the pid" }));
    expect(isAlive(pid)).toBe(true);
    child.kill("SIGTERM");
    const result = await done;
    expect(result.code).toBe(143);
    await waitFor(() => !isAlive(pid), { what: "the remote command to be killed" });
  });

  it("abandons a command that ignores the first Ctrl-C at the second: the daemon kills it, exit 130", async () => {
    const { child, done, printed } = startCli([
      "exec",
      "--",
      "sh",
      "-c",
      "echo $$; trap 'echo ignored' INT; while :; do sleep 0.1; done",
    ]);
    const pid = Number(await waitFor(() => /^(\d+)\n/.exec(printed())?.[1], { what: "the pid" }));
    child.kill("SIGINT");
    await waitFor(() => printed().includes("ignored"), { what: "the first SIGINT to reach the command" });
    expect(isAlive(pid)).toBe(true);
    child.kill("SIGINT");
    const result = await done;
    expect(result.code).toBe(130);
    await waitFor(() => !isAlive(pid), { what: "the remote command to be killed" });
  });

  it("exits 141 (SIGPIPE) when the reader of its output goes away, and the command is killed", async () => {
    const { child, done, printed } = startCli(["exec", "--", "sh", "-c", "echo $$; exec yes"]);
    const pid = Number(await waitFor(() => /^(\d+)\n/.exec(printed())?.[1], { what: "the pid" }));
    child.stdout.destroy();
    const result = await done;
    expect(result.code).toBe(141);
    await waitFor(() => !isAlive(pid), { what: "the remote command to be killed" });
  });
});

/** Starts the CLI and keeps what it prints; `printed()` is its stdout so far. */
function startCli(args: readonly string[]) {
  const child = spawnCli(args, { url: t.server.url });
  const chunks: Buffer[] = [];
  child.stdout.on("data", (chunk: Buffer) => chunks.push(chunk));
  return { child, done: collect(child), printed: () => Buffer.concat(chunks).toString() };
}
