import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collect, runCli, spawnCli } from "./support/cli.js";
import { isAlive, waitFor } from "./support/processes.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

const cli = (args: readonly string[], options: { input?: string | Buffer } = {}) =>
  runCli(args, { url: t.server.url, ...options });

/** What `ps -o json` prints for one process. */
interface Row {
  id: string;
  pid: number | null;
  status: string;
  exitCode: number | null;
  signal: string | null;
  cause: string | null;
  sessionId: string | null;
  startTime: string;
  endTime: string | null;
  command: string;
  args: string[];
}

async function psJson(...flags: string[]): Promise<Row[]> {
  const result = await cli(["ps", "-o", "json", ...flags]);
  expect(result.code).toBe(0);
  return JSON.parse(result.stdout.toString()) as Row[];
}

/** Polls ps -a until process `id` has exited; returns its row. */
async function exitedRow(id: string): Promise<Row> {
  const row = await waitFor(
    async () => (await psJson("-a")).find((candidate) => candidate.id === id && candidate.endTime !== null),
    {
      what: `${id} to exit`,
      timeoutMs: 15_000,
      intervalMs: 100,
    },
  );
  return row!;
}

describe("sandbox start and ps", () => {
  it("start prints the process id (a UUID, or --id); ps lists it as a table and as JSON", async () => {
    const random = await cli(["start", "--", "sleep", "30"]);
    expect(random.code).toBe(0);
    const randomId = random.stdout.toString().trim();
    expect(randomId).toMatch(/^[0-9a-f-]{36}$/);
    const named = await cli([
      "start",
      "--id",
      "cli-named",
      "--session",
      "cli-session",
      "--",
      "sh",
      "-c",
      "sleep 30 # it's",
    ]);
    expect(named.stdout.toString()).toBe("cli-named\n");

    const table = (await cli(["ps"])).stdout.toString().split("\n");
    expect(table[0]).toMatch(/^ID +PID +STATUS +AGE +SESSION +COMMAND$/);
    expect(table.find((line) => line.startsWith(randomId))).toMatch(/ running +\d+s +\S+ +sleep 30$/);
    expect(table.find((line) => line.startsWith("cli-named "))).toMatch(
      / running +\d+s +cli-session +sh -c 'sleep 30 # it'\\''s'$/,
    );

    const rows = await psJson();
    const row = rows.find((candidate) => candidate.id === "cli-named")!;
    expect(row).toMatchObject({
      status: "running",
      exitCode: null,
      signal: null,
      sessionId: "cli-session",
      command: "sh",
      args: ["-c", "sleep 30 # it's"],
      endTime: null,
    });
    expect(isAlive(row.pid!)).toBe(true);
    expect(Date.parse(row.startTime)).toBeGreaterThan(Date.now() - 60_000);

    // --session lists only that session's processes.
    expect((await psJson("--session", "cli-session")).map((candidate) => candidate.id)).toEqual(["cli-named"]);

    expect((await cli(["kill", "-s", "KILL", randomId, "cli-named"])).code).toBe(0);
    expect((await exitedRow("cli-named")).signal).toBe("SIGKILL");
    // Without -a only live processes are listed.
    expect((await psJson()).map((candidate) => candidate.id)).not.toContain("cli-named");
  });

  it("start -i keeps stdin open for attach -i, which passes piped input and its end on and exits with the process's code", async () => {
    const id = (await cli(["start", "-i", "--", "sh", "-c", "tr a-z A-Z; exit 4"])).stdout.toString().trim();
    const attached = await cli(["attach", "-i", id], { input: "hello\nworld\n" });
    expect(attached.stdout.toString()).toBe("HELLO\nWORLD\n");
    expect(attached.code).toBe(4);
  });

  it("start reports a program that cannot be found in one line, exit 1", async () => {
    const result = await cli(["start", "--", "no-such-program-cli-start", "x"]);
    expect(result.code).toBe(1);
    expect(result.stderr.toString()).toMatch(/^sandbox: program not found: no-such-program-cli-start\n$/);
    expect(result.stdout.toString()).toBe("");
  });

  it("start refuses an id a live process has, in one line, exit 1", async () => {
    await cli(["start", "--id", "cli-twice", "--", "sleep", "30"]);
    const again = await cli(["start", "--id", "cli-twice", "--", "sleep", "30"]);
    expect(again.code).toBe(1);
    expect(again.stderr.toString()).toMatch(/^sandbox: [^\n]*cli-twice[^\n]*\n$/);
    await cli(["kill", "-s", "KILL", "cli-twice"]);
  });
});

describe("sandbox logs", () => {
  it("prints the retained stdout and stderr byte for byte, from --from-offset on", async () => {
    const out = randomBytes(100_000);
    const err = randomBytes(50_000);
    writeFileSync(path.join(t.workspace, "out.bin"), out);
    writeFileSync(path.join(t.workspace, "err.bin"), err);
    const id = (await cli(["start", "--", "sh", "-c", "cat out.bin; cat err.bin >&2"])).stdout.toString().trim();
    await exitedRow(id);

    const all = await cli(["logs", id]);
    expect(all.code).toBe(0);
    expect(all.stdout.equals(out)).toBe(true);
    expect(all.stderr.equals(err)).toBe(true);

    const stdoutOnly = await cli(["logs", "--from-offset", "1000", id]);
    expect(stdoutOnly.stdout.equals(out.subarray(1000))).toBe(true);
    expect(stdoutOnly.stderr.equals(err)).toBe(true);
    const both = await cli(["logs", "--from-offset", "99999,49000", id]);
    expect(both.stdout.equals(out.subarray(99_999))).toBe(true);
    expect(both.stderr.equals(err.subarray(49_000))).toBe(true);
  });

  it("prints what a running process printed so far, and returns", async () => {
    const id = (await cli(["start", "--", "sh", "-c", "echo first; exec sleep 30"])).stdout.toString().trim();
    await waitFor(async () => (await cli(["logs", id])).stdout.toString() === "first\n", {
      what: "the first line",
      intervalMs: 100,
    });
    await cli(["kill", "-s", "KILL", id]);
  });

  it("-f follows live output until the process exits, byte for byte", async () => {
    // The rest of the output waits for the file `go-logs`, so the test sees -f print while the process runs.
    const script =
      "echo out 1; echo err 1 >&2; while [ ! -e go-logs ]; do sleep 0.05; done; for i in 2 3 4; do echo out $i; echo err $i >&2; done; printf '\\377\\000end'";
    const id = (await cli(["start", "--", "sh", "-c", script])).stdout.toString().trim();
    const child = spawnCli(["logs", "-f", id], { url: t.server.url });
    const seen: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => seen.push(chunk));
    const done = collect(child);
    await waitFor(() => Buffer.concat(seen).toString() === "out 1\n", { what: "the first line" });
    expect(child.exitCode).toBeNull();
    writeFileSync(path.join(t.workspace, "go-logs"), "");
    const result = await done;
    expect(result.code).toBe(0);
    expect(
      result.stdout.equals(
        Buffer.concat([Buffer.from("out 1\nout 2\nout 3\nout 4\n"), Buffer.from([0xff, 0x00]), Buffer.from("end")]),
      ),
    ).toBe(true);
    expect(result.stderr.toString()).toBe("err 1\nerr 2\nerr 3\nerr 4\n");
  });

  it("-f --from-offset resumes after the bytes already read", async () => {
    const id = (await cli(["start", "--", "sh", "-c", "echo 0123456789; sleep 0.5; echo abc"])).stdout
      .toString()
      .trim();
    const result = await cli(["logs", "-f", "--from-offset", "5", id]);
    expect(result.stdout.toString()).toBe("56789\nabc\n");
  });

  it("says in one line that a process is unknown, exit 1; a bad offset is a usage error, exit 2", async () => {
    const missing = await cli(["logs", "no-such-process"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr.toString()).toBe("sandbox: no such process: no-such-process\n");
    const bad = await cli(["logs", "--from-offset", "-3", "x"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr.toString()).toMatch(/^sandbox: [^\n]*--from-offset[^\n]*\n$/);
  });
});

describe("sandbox kill", () => {
  it("sends the signal given with -s (name or number) to the process group", async () => {
    const id = (await cli(["start", "--", "sh", "-c", 'trap "exit 9" USR1; while :; do sleep 0.1; done'])).stdout
      .toString()
      .trim();
    expect((await cli(["kill", "-s", "usr1", id])).code).toBe(0);
    expect(await exitedRow(id)).toMatchObject({ status: "failed", exitCode: 9 });

    const other = (await cli(["start", "--", "sleep", "30"])).stdout.toString().trim();
    expect((await cli(["kill", "-s", "9", other])).code).toBe(0);
    expect(await exitedRow(other)).toMatchObject({ status: "killed", exitCode: 137, signal: "SIGKILL" });
  });

  it("sends SIGTERM by default", async () => {
    const id = (await cli(["start", "--", "sleep", "30"])).stdout.toString().trim();
    expect((await cli(["kill", id])).code).toBe(0);
    expect(await exitedRow(id)).toMatchObject({ exitCode: 143, signal: "SIGTERM", cause: "killed_on_request" });
    const line = (await cli(["ps", "-a"])).stdout
      .toString()
      .split("\n")
      .find((candidate) => candidate.startsWith(`${id} `));
    expect(line).toMatch(/ killed \(SIGTERM, killed on request\) /);
  });

  it("reports an unknown process (exit 1) and an unknown signal (exit 2) in one line", async () => {
    const missing = await cli(["kill", "no-such-process"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr.toString()).toBe("sandbox: no such process: no-such-process\n");
    const bad = await cli(["kill", "-s", "SIGNOPE", "x"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr.toString()).toMatch(/^sandbox: [^\n]*unknown signal: SIGNOPE[^\n]*\n$/);
  });
});

describe("sandbox attach", () => {
  it("follows output from now on and exits with the process's exit code (128 + n for a signal)", async () => {
    // It prints `before`, then ticks until the file `go` appears in its working directory, then `after`, and dies of SIGTERM.
    const script = "echo before; while [ ! -e go ]; do echo tick; sleep 0.1; done; echo after; kill -TERM $$";
    const id = (await cli(["start", "--", "sh", "-c", script])).stdout.toString().trim();
    await waitFor(async () => (await cli(["logs", id])).stdout.toString().startsWith("before\ntick\n"), {
      what: "the first lines",
      intervalMs: 100,
    });
    const child = spawnCli(["attach", id], { url: t.server.url });
    const seen: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => seen.push(chunk));
    const done = collect(child);
    await waitFor(() => Buffer.concat(seen).toString().includes("tick"), { what: "attach to follow" });
    writeFileSync(path.join(t.workspace, "go"), "");
    const result = await done;
    expect(result.stdout.toString()).toMatch(/^(tick\n)+after\n$/);
    expect(result.code).toBe(143);
  });

  it("detaches on Ctrl-C (SIGINT) and leaves the process running", async () => {
    const id = (await cli(["start", "--", "sh", "-c", "while :; do echo tick; sleep 0.2; done"])).stdout
      .toString()
      .trim();
    const child = spawnCli(["attach", id], { url: t.server.url });
    const seen: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => seen.push(chunk));
    const done = collect(child);
    await waitFor(() => Buffer.concat(seen).toString().includes("tick"), { what: "output" });
    child.kill("SIGINT");
    expect((await done).code).toBe(130);
    expect((await psJson()).find((row) => row.id === id)?.status).toBe("running");
    await cli(["kill", "-s", "KILL", id]);
  });

  it("refuses -i for a process that takes no input, in one line, exit 125", async () => {
    const id = (await cli(["start", "--", "sleep", "30"])).stdout.toString().trim();
    const result = await cli(["attach", "-i", id]);
    expect(result.code).toBe(125);
    expect(result.stderr.toString()).toMatch(/^sandbox: process \S+ takes no input: start it with -i or -t\n$/);
    await cli(["kill", "-s", "KILL", id]);
  });
});
