import { chmodSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { connect } from "../src/client/index.js";
import { daemonFromSource, startDaemonProcess } from "./support/daemon-process.js";

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
    // The daemon runs as nobody, as in a container image with a non-root user, and so do its commands.
    const daemon = await startDaemonProcess(["--workspace", workspace, "--log-format", "json"], {
      file: "setpriv",
      args: [`--reuid=${nobody}`, `--regid=${nobody}`, "--clear-groups", daemonFromSource.file, ...(daemonFromSource.args ?? [])],
      env: { ...process.env, SANDBOXD_TOKEN: "token-only-the-daemon-knows" },
    });
    cleanups.push(() => daemon.child.kill("SIGKILL"));
    const sandbox = await connect({ baseUrl: daemon.url, token: "token-only-the-daemon-knows" });
    try {
      const result = await sandbox.exec("id -u; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; cat /proc/$PPID/environ");
      const [uid, parent] = result.stdout.split("\n");
      expect(uid).toBe(String(nobody));
      // $PPID is the daemon itself (its command line is public)...
      expect(parent).toContain("src/cli/sandboxd.ts");
      // ...but its environment is not, to a process of the same uid.
      expect(result.stdout).not.toContain("token-only-the-daemon-knows");
      expect(result.stderr).toContain("Permission denied");
      expect(result.exitCode).not.toBe(0);
    } finally {
      await sandbox.close();
    }
  }, 60_000);
});
