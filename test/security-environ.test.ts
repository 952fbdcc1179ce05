import { chmodSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { connect } from "../src/client/index.js";
import { defaultPath, resolveUser } from "../src/process/index.js";
import { bundleDaemon } from "./support/daemon-bundle.js";
import { startDaemonProcess, type DaemonCommand } from "./support/daemon-process.js";
import { repositoryRoot } from "./support/tools.js";

const nobody = 65534;

describe("the token in the daemon's environment", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });

  it("cannot be read from /proc/<daemon>/environ by a command running as the daemon's own user", async () => {
    const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-environ-")));
    chmodSync(workspace, 0o755);
    cleanups.push(() => rmSync(workspace, { recursive: true, force: true }));
    // The daemon runs as nobody, as in a container image with a non-root user, and so do its commands. The
    // checkout may sit where nobody cannot reach it: the daemon runs from a bundle nobody can read.
    const bundle = await bundleDaemon();
    cleanups.push(() => bundle.remove());
    const daemon = await startDaemonProcess(["--workspace", workspace, "--log-format", "json"], {
      file: "setpriv",
      args: [`--reuid=${nobody}`, `--regid=${nobody}`, "--clear-groups", process.execPath, bundle.script],
      cwd: workspace,
      env: {
        ...process.env,
        SANDBOXD_TOKEN: "token-only-the-daemon-knows",
        ...bundle.env,
      },
    });
    cleanups.push(() => daemon.child.kill("SIGKILL"));
    const sandbox = await connect({ baseUrl: daemon.url, token: "token-only-the-daemon-knows" });
    try {
      const result = await sandbox.exec("id -u; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; cat /proc/$PPID/environ");
      const [uid, parent] = result.stdout.split("\n");
      expect(uid).toBe(String(nobody));
      // $PPID is the daemon itself (its command line is public)...
      expect(parent).toContain("sandboxd.mjs");
      // ...but its environment is not, to a process of the same uid.
      expect(result.stdout).not.toContain("token-only-the-daemon-knows");
      expect(result.stderr).toContain("Permission denied");
      expect(result.exitCode).not.toBe(0);
      // It can still signal the daemon, and the daemon says so at start.
      expect(daemon.stderr()).toContain("commands run as the daemon's own user: they can signal it");
      // Not root, it has no pids cgroup: each command's forks are capped by a supervisor tracing it, and it says so.
      expect(daemon.stderr()).toContain("fork cap: traced (no writable pids cgroup");
    } finally {
      await sandbox.close();
    }
  }, 60_000);
});

/** `npm start`, as README's first command runs the daemon: npm, a shell, then node. */
const npmStart: DaemonCommand = { file: "npm", args: ["start", "--silent", "--"], cwd: repositoryRoot };

/** The variables of `env`'s output (one NAME=value a line; no value here spans lines). */
function parseEnv(text: string): Map<string, string> {
  return new Map(
    text
      .split("\n")
      .filter((line) => line.includes("="))
      .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
  );
}

describe("a command's base environment is the daemon's own, never how the daemon was started", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0).reverse()) cleanup();
  });

  /** Starts the daemon with `npm start` from a launcher environment full of its own values, USER and LOGNAME unset. */
  async function startUnderNpm(flags: string[], extra: NodeJS.ProcessEnv = {}) {
    const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-base-env-")));
    chmodSync(workspace, 0o755);
    cleanups.push(() => rmSync(workspace, { recursive: true, force: true }));
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: "/launcher-home",
      SHELL: "/launcher/shell",
      LANG: "xx_XX.launcher",
      TZ: "Launcher/Zone",
      TMPDIR: "/launcher-tmp",
      ...extra,
    };
    delete env.USER;
    delete env.LOGNAME;
    const daemon = await startDaemonProcess(["--workspace", workspace, "--log-format", "json", ...flags], {
      ...npmStart,
      env,
    });
    cleanups.push(() => daemon.child.kill("SIGKILL"));
    return daemon;
  }

  it("under npm start: PATH has no node_modules/.bin nor npm's helper directories; USER and LOGNAME name the daemon's user", async () => {
    const daemon = await startUnderNpm([]);
    const sandbox = await connect({ baseUrl: daemon.url });
    try {
      const result = await sandbox.exec("env");
      const env = parseEnv(result.stdout);
      const me = userInfo();
      expect(env.get("PATH")).toBe(defaultPath);
      expect(result.stdout).not.toContain("node_modules");
      expect(result.stdout).not.toContain("node-gyp-bin");
      expect(result.stdout).not.toMatch(/^npm_/m);
      expect(result.stdout).not.toContain("launcher");
      expect(
        Object.fromEntries([...env].filter(([name]) => ["HOME", "USER", "LOGNAME", "SHELL", "LANG"].includes(name))),
      ).toEqual({
        HOME: me.homedir,
        USER: me.username,
        LOGNAME: me.username,
        SHELL: me.shell ?? "/bin/sh",
        LANG: "C.UTF-8",
      });
      // What a command runs is the system's, not the project's: `tsc` is not the daemon's own.
      expect((await sandbox.exec("command -v tsc vitest; echo done")).stdout).toBe("done\n");
    } finally {
      await sandbox.close();
    }
  }, 60_000);

  it.skipIf(process.getuid?.() !== 0)(
    "with --user, HOME, USER, LOGNAME and SHELL are that user's, on pipes and a terminal",
    async () => {
      const nobody = resolveUser("nobody");
      const daemon = await startUnderNpm(["--user", "nobody"], { SANDBOXD_TOKEN: "base-env-token" });
      const sandbox = await connect({ baseUrl: daemon.url, token: "base-env-token" });
      try {
        for (const pty of [false, true]) {
          const result = await sandbox.exec("env", { pty });
          const env = parseEnv(result.stdout.replaceAll("\r", ""));
          expect(env.get("PATH")).toBe(defaultPath);
          expect([env.get("HOME"), env.get("USER"), env.get("LOGNAME"), env.get("SHELL")]).toEqual([
            nobody.home,
            "nobody",
            "nobody",
            nobody.shell ?? "/bin/sh",
          ]);
          expect(result.stdout).not.toContain("base-env-token");
        }
      } finally {
        await sandbox.close();
      }
    },
    60_000,
  );
});
