import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "./support/cli.js";
import { waitFor } from "./support/processes.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { repositoryRoot } from "./support/tools.js";

const token = "cli-test-token-0123456789";
let open: TestServer;
let guarded: TestServer;
let dir: string;
let tokenFile: string;

beforeAll(async () => {
  [open, guarded] = await Promise.all([startTestServer(), startTestServer({ token })]);
  dir = mkdtempSync(path.join(tmpdir(), "sandbox-cli-basics-"));
  tokenFile = path.join(dir, "token");
  writeFileSync(tokenFile, `${token}\n`);
  chmodSync(tokenFile, 0o600);
});
afterAll(async () => {
  await Promise.all([open.close(), guarded.close()]);
  rmSync(dir, { recursive: true, force: true });
});

/** A port on which nothing listens. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Asserts that stderr is exactly one `sandbox: ...` line matching `pattern`. */
function expectOneLine(stderr: Buffer, pattern: RegExp): void {
  const text = stderr.toString();
  expect(text).toMatch(/^sandbox: [^\n]+\n$/);
  expect(text).toMatch(pattern);
}

describe("sandbox --version and --help", () => {
  it("--version prints the package's version", async () => {
    const { version } = JSON.parse(readFileSync(path.join(repositoryRoot, "package.json"), "utf8")) as {
      version: string;
    };
    for (const flag of ["--version", "-V"]) {
      const result = await runCli([flag]);
      expect(result.code).toBe(0);
      expect(result.stdout.toString()).toBe(`${version}\n`);
    }
  });

  it("--help lists the commands and the exit codes; each command has its own --help", async () => {
    const top = await runCli(["--help"]);
    expect(top.code).toBe(0);
    for (const name of ["exec", "start", "ps", "logs", "kill", "attach"])
      expect(top.stdout.toString()).toMatch(new RegExp(`\\n  ${name} `));
    expect(top.stdout.toString()).toContain("125");
    const expected: Record<string, string[]> = {
      exec: ["--interactive", "--tty", "--env", "--workdir", "--timeout", "--url", "--token-file"],
      start: ["--interactive", "--tty", "--id", "--session"],
      ps: ["--all", "--output", "--session"],
      logs: ["--follow", "--from-offset"],
      kill: ["--signal"],
      attach: ["--interactive"],
    };
    for (const [name, flags] of Object.entries(expected)) {
      const help = await runCli([name, "--help"]);
      expect(help.code).toBe(0);
      expect(help.stdout.toString()).toMatch(new RegExp(`^Usage: sandbox ${name} `));
      for (const flag of flags) expect(help.stdout.toString()).toContain(flag);
    }
  });

  it("with no command prints the help on stderr and exits 2", async () => {
    const result = await runCli([]);
    expect(result.code).toBe(2);
    expect(result.stderr.toString()).toContain("Usage: sandbox");
  });
});

describe("sandbox usage errors: one line, exit 2 (125 for exec and attach)", () => {
  it("an unknown command", async () => {
    const result = await runCli(["exce", "--", "true"]);
    expect(result.code).toBe(2);
    expectOneLine(result.stderr, /unknown command 'exce'.*Did you mean exec\?/);
  });

  it("an unknown flag", async () => {
    const ps = await runCli(["ps", "--bogus"], { url: open.server.url });
    expect(ps.code).toBe(2);
    expectOneLine(ps.stderr, /unknown option '--bogus'.*sandbox ps --help/);
    const exec = await runCli(["exec", "--bogus", "--", "true"], { url: open.server.url });
    expect(exec.code).toBe(125);
    expectOneLine(exec.stderr, /unknown option '--bogus'/);
  });

  it("a missing argument, a bad -e, a bad -o", async () => {
    const noCommand = await runCli(["exec", "-it"], { url: open.server.url });
    expect(noCommand.code).toBe(125);
    expectOneLine(noCommand.stderr, /missing required argument 'command'/);
    const badEnv = await runCli(["exec", "-e", "=x", "--", "true"], { url: open.server.url });
    expect(badEnv.code).toBe(125);
    expectOneLine(badEnv.stderr, /KEY=VALUE/);
    const badOutput = await runCli(["ps", "-o", "yaml"], { url: open.server.url });
    expect(badOutput.code).toBe(2);
    expectOneLine(badOutput.stderr, /yaml.*table, json/);
  });
});

describe("sandbox connection failures: one line, exit 1 (125 for exec)", () => {
  it("a daemon that cannot be reached", async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const exec = await runCli(["exec", "--", "true"], { url });
    expect(exec.code).toBe(125);
    expectOneLine(exec.stderr, new RegExp(`cannot connect to ${url}: .*ECONNREFUSED`));
    const ps = await runCli(["ps", "--url", url]);
    expect(ps.code).toBe(1);
    expectOneLine(ps.stderr, /cannot connect to/);
  });

  it("a URL that is not one", async () => {
    const result = await runCli(["ps"], { url: "localhost:7007" });
    expect(result.code).toBe(2);
    expectOneLine(
      result.stderr,
      /invalid daemon URL "localhost:7007": write it as http:\/\/host:port \(the daemon speaks plain HTTP by default\)/,
    );
  });

  it("https:// against a daemon that speaks plain HTTP says so, instead of OpenSSL's words", async () => {
    const result = await runCli(["ps"], { url: open.server.url.replace("http:", "https:") });
    expect(result.code).toBe(1);
    expectOneLine(
      result.stderr,
      /speaks plain HTTP, not TLS: use http:\/\/127\.0\.0\.1:\d+, or start the daemon with --tls-cert and --tls-key/,
    );
    expect(result.stderr.toString()).not.toContain("wrong version number");
  });

  it("refuses to send the token in clear to a host that is not loopback, unless --allow-cleartext-token", async () => {
    // 192.0.2.1 is TEST-NET-1: nothing answers there; the refusal comes before any connection.
    const refused = await runCli(["ps", "--url", "http://192.0.2.1:7007"], { env: { SANDBOXD_TOKEN: token } });
    expect(refused.code).toBe(2);
    expectOneLine(
      refused.stderr,
      /refusing to send the token in clear to http:\/\/192\.0\.2\.1:7007: use https:\/\/ .*--allow-cleartext-token/,
    );
    // Allowed, the same command gets as far as connecting (and fails there: nobody listens).
    const allowed = await runCli(["--allow-cleartext-token", "ps", "--url", "http://192.0.2.1:7007"], {
      env: { SANDBOXD_TOKEN: token },
      timeoutMs: 60_000,
    });
    expect(allowed.code).toBe(1);
    expectOneLine(allowed.stderr, /cannot connect to http:\/\/192\.0\.2\.1:7007/);
  });

  it("no token, a wrong token and an unreadable token file, against a daemon that wants one", async () => {
    const none = await runCli(["exec", "--", "true"], { url: guarded.server.url });
    expect(none.code).toBe(125);
    expectOneLine(none.stderr, /wants a token \(--token-file or SANDBOXD_TOKEN\)/);
    const wrong = await runCli(["ps"], { url: guarded.server.url, env: { SANDBOXD_TOKEN: "not-the-token" } });
    expect(wrong.code).toBe(1);
    expectOneLine(wrong.stderr, /refused the token/);
    expect(wrong.stderr.toString()).not.toContain("not-the-token");
    const missing = await runCli(["ps", "--token-file", path.join(dir, "absent")], { url: guarded.server.url });
    expect(missing.code).toBe(1);
    expectOneLine(missing.stderr, /cannot read the token file .*absent: ENOENT/);
  });

  it("the right token from --token-file or SANDBOXD_TOKEN, and the URL from --url or SANDBOXD_URL", async () => {
    const fromFile = await runCli(["exec", "--url", guarded.server.url, "--token-file", tokenFile, "--", "echo", "in"]);
    expect(fromFile.code).toBe(0);
    expect(fromFile.stdout.toString()).toBe("in\n");
    const fromEnv = await runCli(["exec", "--", "echo", "in"], {
      url: guarded.server.url,
      env: { SANDBOXD_TOKEN: token },
    });
    expect(fromEnv.stdout.toString()).toBe("in\n");
    expect(fromEnv.stderr.toString()).toBe("");
    // The old names still work, with one warning line each naming the new one.
    const old = await runCli(["exec", "--", "echo", "old"], {
      env: { SANDBOX_URL: guarded.server.url, SANDBOX_TOKEN: token },
    });
    expect(old.stdout.toString()).toBe("old\n");
    expect(old.stderr.toString()).toMatch(
      /^sandbox: warning: SANDBOX_URL is deprecated: set SANDBOXD_URL instead.*\nsandbox: warning: SANDBOX_TOKEN is deprecated: set SANDBOXD_TOKEN instead.*\n$/,
    );
    // --url wins over SANDBOXD_URL, before the command's name or after it (where it wins over one before).
    const elsewhere = `http://127.0.0.1:${await closedPort()}`;
    const flagWins = await runCli(["exec", "--url", open.server.url, "--", "echo", "open"], { url: elsewhere });
    expect(flagWins.stdout.toString()).toBe("open\n");
    const before = await runCli(["--url", open.server.url, "exec", "--", "echo", "before"], { url: elsewhere });
    expect(before.stdout.toString()).toBe("before\n");
    const both = await runCli([
      "--url",
      elsewhere,
      "--token-file",
      tokenFile,
      "exec",
      "--url",
      guarded.server.url,
      "--",
      "echo",
      "both",
    ]);
    expect(both.stdout.toString()).toBe("both\n");
  });

  it("a daemon that goes away under exec: one line, exit 125", async () => {
    const doomed = await startTestServer();
    const running = runCli(["exec", "--", "sleep", "30"], { url: doomed.server.url });
    await waitFor(async () => (await doomed.client.listProcesses({})).processes.length > 0, {
      what: "the command to start",
      intervalMs: 50,
    });
    await doomed.close();
    const result = await running;
    expect(result.code).toBe(125);
    expectOneLine(result.stderr, /lost the connection to the daemon: .*shutting down/);
  });
});
