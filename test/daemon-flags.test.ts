import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { daemonFlags, daemonFlagsTable } from "../src/cli/sandboxd/flags.js";
import { parseCommandLine, usage } from "../src/cli/sandboxd/options.js";
import { startTestServer } from "./support/server.js";
import { repositoryRoot, runCommand } from "./support/tools.js";

const packageVersion = (JSON.parse(readFileSync(`${repositoryRoot}/package.json`, "utf8")) as { version: string })
  .version;

/** The daemon from source, as a user at a terminal runs it: exit code and what it printed. */
function daemon(args: readonly string[], env: NodeJS.ProcessEnv = {}) {
  return runCommand(process.execPath, ["--import", "tsx", "src/cli/sandboxd.ts", ...args], { env });
}

describe("the daemon's flags", () => {
  it("has a SANDBOXD_* variable for every flag, named after it, and the help lists both", () => {
    for (const flag of daemonFlags) {
      const expected = `SANDBOXD_${flag.name.toUpperCase().replaceAll("-", "_")}${flag.separator === "," ? "S" : ""}`;
      expect(flag.env).toBe(expected);
      expect(usage).toContain(`--${flag.name}`);
      expect(usage).toContain(flag.env);
    }
    expect(daemonFlags.length).toBe(46);
  });

  it("the README's Daemon flags table is the table the parser uses", () => {
    const readme = readFileSync(`${repositoryRoot}/README.md`, "utf8");
    const section = readme.slice(readme.indexOf("\n## Daemon flags\n"), readme.indexOf("\n## Client\n"));
    expect(section).toContain(daemonFlagsTable());
  });

  it("reads every kind of flag from its variable, and a flag beats its variable", () => {
    const fromEnv = parseCommandLine([], {
      SANDBOXD_INSECURE: "1",
      SANDBOXD_METRICS_PUBLIC: "true",
      SANDBOXD_LOG_COMMANDS: "yes",
      SANDBOXD_MAX_CALLS_PER_CONNECTION: "7",
      SANDBOXD_CORS_ORIGINS: "https://a.example, https://b.example",
      SANDBOXD_WORKSPACE: "/tmp:/var/tmp",
      SANDBOXD_PORT: "7100",
    });
    if (fromEnv.kind !== "serve") throw new Error("expected options");
    expect(fromEnv.options).toMatchObject({
      insecure: true,
      metricsPublic: true,
      logCommands: true,
      callLimits: { maxCallsPerConnection: 7 },
      corsOrigins: ["https://a.example", "https://b.example"],
      workspaceRoots: ["/tmp", "/var/tmp"],
      port: 7100,
    });
    const flagWins = parseCommandLine(["--port", "7200", "--workspace", "/srv"], {
      SANDBOXD_PORT: "7100",
      SANDBOXD_WORKSPACE: "/tmp",
    });
    expect(flagWins.kind === "serve" && [flagWins.options.port, flagWins.options.workspaceRoots]).toEqual([
      7200,
      ["/srv"],
    ]);
    const weighted = parseCommandLine(["--commands-cpu-weight", "0"], {});
    expect(weighted.kind === "serve" && weighted.options.launcher?.resources?.applied.cpuWeight).toBeUndefined();
    expect(() => parseCommandLine(["--commands-cpu-weight=-1"], {})).toThrow(
      '--commands-cpu-weight must be a number from 0 to 16, got "-1"',
    );
    const off = parseCommandLine([], { SANDBOXD_INSECURE: "0" });
    expect(off.kind === "serve" && off.options.insecure).toBe(false);
  });

  it("refuses bad values with one line that names the flag or variable", () => {
    expect(() => parseCommandLine(["--port", "70000"], {})).toThrow(
      '--port must be an integer from 0 to 65535, got "70000"',
    );
    expect(() => parseCommandLine(["--max-processes", " "], {})).toThrow("--max-processes must be an integer");
    expect(() => parseCommandLine([], { SANDBOXD_INSECURE: "maybe" })).toThrow(
      'SANDBOXD_INSECURE must be 1, true, yes, 0, false or no, got "maybe"',
    );
    expect(() => parseCommandLine(["--no-such-flag"], {})).toThrow("Unknown option '--no-such-flag'");
    expect(() => parseCommandLine(["--token-file", "/nonexistent/token"], {})).toThrow(
      "--token-file /nonexistent/token: no such file",
    );
    expect(() => parseCommandLine(["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"], {})).toThrow(
      "--tls-cert /nonexistent/c.pem: no such file",
    );
  });

  it("--version prints the package's version; a missing workspace is one clear line and exit 1", async () => {
    const version = await daemon(["--version"]);
    expect(version).toMatchObject({ code: 0, stdout: `sandboxd ${packageVersion}\n` });
    const missing = await daemon(["--workspace", "/nonexistent/workspace", "--port", "0", "--log-format", "json"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("workspace root /nonexistent/workspace does not exist");
    expect(missing.stderr).not.toContain("ENOENT");
    const bad = await daemon(["--port", "x"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe(
      'sandboxd: --port must be an integer from 0 to 65535, got "x"\n(sandboxd --help lists the flags)\n',
    );
  });

  it("reports its version to clients: a header on /healthz and the sandboxd_build_info metric", async () => {
    const t = await startTestServer({ metricsPublic: true });
    try {
      const health = await fetch(new URL("/healthz", t.server.url));
      expect(health.headers.get("sandboxd-version")).toBe(packageVersion);
      const metrics = await (await fetch(new URL("/metrics", t.server.url))).text();
      expect(metrics).toContain(`sandboxd_build_info{version="${packageVersion}",node="${process.version}"} 1`);
    } finally {
      await t.close();
    }
  });
});
