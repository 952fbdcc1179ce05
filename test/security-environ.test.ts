import { chmodSync, copyFileSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { connect } from "../src/client/index.js";
import { build } from "esbuild";
import { startDaemonProcess } from "./support/daemon-process.js";
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
    // checkout may sit where nobody cannot reach it (a 0700 temporary directory): the daemon is bundled into
    // one file beside copies of its native parts, in a directory nobody can read.
    const bundle = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-environ-bundle-")));
    chmodSync(bundle, 0o755);
    cleanups.push(() => rmSync(bundle, { recursive: true, force: true }));
    await build({
      entryPoints: [path.join(repositoryRoot, "src/cli/sandboxd.ts")],
      outfile: path.join(bundle, "sandboxd.mjs"),
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      external: ["node-pty"],
      banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
      logLevel: "error",
    });
    for (const file of ["sandboxd-exec", "sandboxd.node"]) copyFileSync(path.join(repositoryRoot, "build", file), path.join(bundle, file));
    chmodSync(path.join(bundle, "sandboxd-exec"), 0o755);
    const daemon = await startDaemonProcess(["--workspace", workspace, "--log-format", "json"], {
      file: "setpriv",
      args: [`--reuid=${nobody}`, `--regid=${nobody}`, "--clear-groups", process.execPath, path.join(bundle, "sandboxd.mjs")],
      cwd: workspace,
      env: {
        ...process.env,
        SANDBOXD_TOKEN: "token-only-the-daemon-knows",
        SANDBOXD_EXEC_HELPER: path.join(bundle, "sandboxd-exec"),
        SANDBOXD_NATIVE_ADDON: path.join(bundle, "sandboxd.node"),
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
    } finally {
      await sandbox.close();
    }
  }, 60_000);
});
