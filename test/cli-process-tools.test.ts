import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { installCliShim, runCli } from "./support/cli.js";
import { waitFor } from "./support/processes.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { runCommand } from "./support/tools.js";

let t: TestServer;
let dir: string;
beforeAll(async () => {
  t = await startTestServer();
  dir = mkdtempSync(path.join(tmpdir(), "sandbox-cli-tools-"));
  installCliShim(dir);
});
afterAll(async () => {
  await t.close();
  rmSync(dir, { recursive: true, force: true });
});

const cli = (args: readonly string[]) => runCli(args, { url: t.server.url });

/** Starts `argv` in the background with `id`; returns the id. */
async function start(id: string, ...argv: string[]): Promise<string> {
  const result = await cli(["start", "--id", id, "--", ...argv]);
  expect(result.stderr.toString()).toBe("");
  return result.stdout.toString().trim();
}

/** Waits until the daemon reports process `id` exited. */
async function exited(id: string): Promise<void> {
  await waitFor(async () => (await t.client.getProcess({ processId: id })).process?.exit !== undefined, {
    what: `${id} to exit`,
  });
}

describe("sandbox ps prints no terminal escapes", { timeout: 240_000 }, () => {
  it("shows control characters of a command line escaped, in the table and in JSON", async () => {
    // An OSC 52 clipboard write, a line erase and a C1 CSI, as a command line would carry them.
    const hostile = "sleep 30 # \u001b]52;c;ZXZpbA==\u0007\u001b[2K\u009b31m\r";
    const id = await start("hostile", hostile);
    try {
      const table = await cli(["ps"]);
      const text = table.stdout.toString();
      expect(text).toContain("sleep 30 # \\e]52;c;ZXZpbA==\\x07\\e[2K\\x9b31m\\r");
      expect(text).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
      const json = (await cli(["ps", "-o", "json"])).stdout.toString();
      expect(json).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
      expect((JSON.parse(json) as { id: string; command: string }[]).find((row) => row.id === id)?.command).toBe(
        hostile,
      );
    } finally {
      await cli(["kill", "-s", "KILL", id]);
    }
  });

  it("escapes them in failure lines too: an id typed with an escape in it", async () => {
    const result = await cli(["logs", "no\u001b[2Jsuch"]);
    expect(result.code).toBe(1);
    expect(result.stderr.toString()).toBe("sandbox: no such process: no\\e[2Jsuch\n");
  });
});

describe("process ids, as docker takes them", { timeout: 240_000 }, () => {
  it("ps -q prints the ids alone; logs, kill and rm take a unique prefix and refuse an ambiguous one", async () => {
    await start("prefix-alpha-1", "sh", "-c", "echo alpha");
    await start("prefix-alpha-2", "sh", "-c", "echo second");
    await start("prefix-beta", "sleep", "30");
    await exited("prefix-alpha-1");
    await exited("prefix-alpha-2");
    const ids = (await cli(["ps", "-q"])).stdout.toString().split("\n");
    expect(ids).toContain("prefix-beta");
    expect(ids).not.toContain("prefix-alpha-1");
    expect((await cli(["ps", "-aq"])).stdout.toString().split("\n")).toEqual(
      expect.arrayContaining(["prefix-alpha-1", "prefix-alpha-2", "prefix-beta"]),
    );

    expect((await cli(["logs", "prefix-alpha-1"])).stdout.toString()).toBe("alpha\n");
    expect((await cli(["logs", "prefix-alpha-2"])).stdout.toString()).toBe("second\n");
    const ambiguous = await cli(["logs", "prefix-alpha"]);
    expect(ambiguous.code).toBe(1);
    expect(ambiguous.stderr.toString()).toBe(
      "sandbox: the id prefix prefix-alpha is ambiguous: it starts 2 ids (prefix-alpha-1, prefix-alpha-2); type more of it\n",
    );
    const killed = await cli(["kill", "-o", "json", "prefix-be"]);
    expect(JSON.parse(killed.stdout.toString())).toEqual({ signalled: ["prefix-beta"], signal: "SIGTERM" });
    await exited("prefix-beta");
  });

  it("rm removes exited records (by prefix), refuses a live one, and --all removes every exited one", async () => {
    await start("rm-done", "true");
    await start("rm-other", "true");
    await start("rm-live", "sleep", "30");
    await exited("rm-done");
    await exited("rm-other");
    const removed = await cli(["rm", "-o", "json", "rm-d"]);
    expect(removed.code).toBe(0);
    expect(JSON.parse(removed.stdout.toString())).toEqual({ removed: ["rm-done"] });
    expect((await cli(["ps", "-aq"])).stdout.toString().split("\n")).not.toContain("rm-done");
    const live = await cli(["rm", "rm-live"]);
    expect(live.code).toBe(1);
    expect(live.stderr.toString()).toBe(
      "sandbox: process rm-live is still running: stop it first (sandbox kill rm-live)\n",
    );
    const all = await cli(["rm", "--all"]);
    expect(all.stdout.toString()).toMatch(/^\d+ exited records? removed\n$/);
    const left = (await cli(["ps", "-aq"])).stdout.toString().split("\n");
    expect(left).not.toContain("rm-other");
    expect(left).toContain("rm-live");
    await cli(["kill", "-s", "KILL", "rm-live"]);
  });

  it("kill --all signals every live process of every session and says how many", async () => {
    await start("all-one", "sleep", "30");
    await start("all-two", "sleep", "30");
    const result = await cli(["kill", "--all", "-s", "KILL"]);
    expect(result.code).toBe(0);
    expect(result.stdout.toString()).toMatch(/^\d+ processes signalled \(SIGKILL\)\n$/);
    await exited("all-one");
    await exited("all-two");
    expect((await cli(["kill", "--all", "all-one"])).stderr.toString()).toBe("sandbox: give ids or --all, not both\n");
  });
});

describe("sandbox start and exec options", { timeout: 240_000 }, () => {
  it("--env-file reads KEY=VALUE lines (comments, export, KEY alone), -e wins; start -o json", async () => {
    const file = path.join(dir, "app.env");
    writeFileSync(
      file,
      '# settings\nGREETING=hello world\n\nexport TARGET="quoted"\nHOME_FROM_HERE\nOVERRIDDEN=file\n',
    );
    const exec = await runCli(
      [
        "exec",
        "--env-file",
        file,
        "-e",
        "OVERRIDDEN=flag",
        "--",
        'echo "$GREETING|$TARGET|$OVERRIDDEN|$HOME_FROM_HERE"',
      ],
      {
        url: t.server.url,
        env: { HOME_FROM_HERE: "passed" },
      },
    );
    expect(exec.stderr.toString()).toBe("");
    expect(exec.stdout.toString()).toBe('hello world|"quoted"|flag|passed\n');
    const started = await cli(["start", "-o", "json", "--env-file", file, "--", 'printf "%s" "$GREETING"']);
    const row = JSON.parse(started.stdout.toString()) as { id: string; pid: number; status: string; sessionId: string };
    expect(Object.keys(row)).toEqual(["id", "pid", "status", "sessionId"]);
    await exited(row.id);
    expect((await cli(["logs", row.id])).stdout.toString()).toBe("hello world");

    writeFileSync(path.join(dir, "bad.env"), "GOOD=1\n=nothing\n");
    const bad = await cli(["exec", "--env-file", path.join(dir, "bad.env"), "--", "true"]);
    expect(bad.code).toBe(125);
    expect(bad.stderr.toString()).toMatch(/^sandbox: .*bad\.env:2: write it as KEY=VALUE/);
  });

  it("exec -o json and logs -o json: one object each, for scripts; exec exits with the command's code", async () => {
    const exec = await cli(["exec", "-o", "json", "--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    expect(exec.code).toBe(3);
    const result = JSON.parse(exec.stdout.toString()) as Record<string, unknown>;
    expect(result).toMatchObject({
      exitCode: 3,
      signal: null,
      timedOut: false,
      stdout: "out\n",
      stderr: "err\n",
      dropped: [],
    });
    expect(typeof result.id).toBe("string");
    const timed = JSON.parse(
      (await cli(["exec", "-o", "json", "--timeout", "1s", "--", "sleep", "30"])).stdout.toString(),
    ) as Record<string, unknown>;
    expect(timed).toMatchObject({ exitCode: 137, signal: "SIGKILL", timedOut: true });
    expect((await cli(["exec", "-o", "json", "-i", "--", "cat"])).code).toBe(125);

    await start("json-logs", "sh", "-c", "echo kept; echo also >&2");
    await exited("json-logs");
    const logs = JSON.parse((await cli(["logs", "-o", "json", "json-logs"])).stdout.toString()) as Record<
      string,
      unknown
    >;
    expect(logs).toEqual({
      id: "json-logs",
      status: "completed",
      cause: "exited",
      exitCode: 0,
      stdout: "kept\n",
      stderr: "also\n",
      stdoutOffset: 0,
      stderrOffset: 0,
      head: { stdout: "", stderr: "" },
      dropped: [],
    });
    expect((await cli(["logs", "-o", "json", "-f", "json-logs"])).stderr.toString()).toBe(
      "sandbox: -o json prints what is kept now: drop -f\n",
    );
  });

  it("logs marks the one gap between head and tail on stderr, where it falls; -o json names it; start sets the sizes", async () => {
    const lines: string[] = [];
    for (let n = 1; n <= 20_000; n++) lines.push(`${n}\n`);
    const expected = Buffer.from(lines.join(""));
    const started = await cli([
      "start",
      "--id",
      "head-tail",
      "--head-bytes",
      "100",
      "--tail-bytes",
      "1K",
      "--",
      "seq",
      "1",
      "20000",
    ]);
    expect(started.stderr.toString()).toBe("");
    await exited("head-tail");
    const logs = await cli(["logs", "head-tail"]);
    expect(logs.code).toBe(0);
    const stdout = logs.stdout;
    // The tail is the last bytes, less 64 bytes of bookkeeping per chunk the daemon holds.
    const tailFrom = expected.length - (stdout.length - 100);
    expect(stdout.length - 100).toBeLessThanOrEqual(1024);
    expect(stdout.length - 100).toBeGreaterThan(1024 - 64 * 4);
    expect(stdout.equals(Buffer.concat([expected.subarray(0, 100), expected.subarray(tailFrom)]))).toBe(true);
    const count = (n: number) => n.toLocaleString("en-US");
    expect(logs.stderr.toString()).toBe(
      `[... ${count(tailFrom - 100)} bytes of stdout dropped (offsets 100 to ${count(tailFrom)}) ...]\n`,
    );
    // Following from the start gives the same: the head, the marker, then the tail.
    const followed = await cli(["logs", "-f", "head-tail"]);
    expect(followed.stdout.equals(stdout)).toBe(true);
    expect(followed.stderr.toString()).toBe(logs.stderr.toString());
    const json = JSON.parse((await cli(["logs", "-o", "json", "head-tail"])).stdout.toString()) as Record<
      string,
      unknown
    >;
    expect(json).toMatchObject({
      head: { stdout: expected.subarray(0, 100).toString(), stderr: "" },
      stdout: expected.subarray(tailFrom).toString(),
      stdoutOffset: tailFrom,
      dropped: [{ stream: "stdout", offset: 100, bytes: tailFrom - 100 }],
    });
    const refused = await cli(["start", "--head-bytes", "1G", "--", "true"]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr.toString()).toContain("above the daemon's max-output-bytes");
  });

  it("exec -w outside the workspace names the allowed roots", async () => {
    const result = await cli(["exec", "-w", "/tmp", "--", "pwd"]);
    expect(result.code).toBe(125);
    expect(result.stderr.toString()).toContain(
      `working directory is outside the workspace roots: /tmp (allowed: ${t.workspace})`,
    );
  });
});

describe("sandbox completion", { timeout: 240_000 }, () => {
  it("prints a bash script that completes commands, flags and the daemon's process ids", async () => {
    const script = path.join(dir, "completion.bash");
    const printed = await cli(["completion", "bash"]);
    expect(printed.code).toBe(0);
    writeFileSync(script, printed.stdout);
    await start("complete-me", "sleep", "30");
    try {
      // bash itself runs the function as it would on Tab, with `sandbox` on PATH being this CLI.
      const complete = (line: string) =>
        runCommand(
          "bash",
          [
            "-c",
            `source ${script}; COMP_WORDS=(${line}); COMP_CWORD=$((\${#COMP_WORDS[@]} - 1)); _sandbox; printf '%s\\n' "\${COMPREPLY[@]}"`,
          ],
          { cwd: dir, env: { PATH: `${dir}:${process.env.PATH}`, SANDBOXD_URL: t.server.url } },
        );
      expect((await complete("sandbox lo")).stdout).toBe("logs\n");
      expect((await complete("sandbox ps --q")).stdout).toBe("--quiet\n");
      expect((await complete("sandbox kill complete-")).stdout).toBe("complete-me\n");
      expect((await complete("sandbox wa")).stdout).toBe("wait\n");
      expect((await complete("sandbox wait l")).stdout).toBe("log\n");
      expect((await complete("sandbox wait port 80 --pa")).stdout).toBe("--path\n");
      expect((await complete("sandbox wait exit complete-")).stdout).toBe("complete-me\n");
      expect((await cli(["completion", "zsh"])).stdout.toString()).toContain("bashcompinit");
    } finally {
      await cli(["kill", "-s", "KILL", "complete-me"]);
    }
  });
});
