import { chmodSync, copyFileSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { build } from "esbuild";
import { repositoryRoot } from "./tools.js";

/** The daemon in one file, beside copies of its native parts, where any user may read and run them. */
export interface DaemonBundle {
  /** The bundled daemon, `node <script> [flags]` runs it. */
  script: string;
  /** The variables that point the daemon at the copies of its native parts. */
  env: { SANDBOXD_EXEC_HELPER: string; SANDBOXD_NATIVE_ADDON: string };
  /** Removes the directory. */
  remove(): void;
}

/**
 * Bundles `src/cli/sandboxd.ts` with esbuild into a new directory of mode 0755, with copies of build/sandboxd-exec
 * and build/sandboxd.node: for a daemon started as a user who cannot reach the checkout (it may sit in a 0700
 * directory).
 */
export async function bundleDaemon(): Promise<DaemonBundle> {
  const directory = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-bundle-")));
  chmodSync(directory, 0o755);
  const script = path.join(directory, "sandboxd.mjs");
  await build({
    entryPoints: [path.join(repositoryRoot, "src/cli/sandboxd.ts")],
    outfile: script,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: ["node-pty"],
    banner: {
      js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
    },
    logLevel: "error",
  });
  for (const file of ["sandboxd-exec", "sandboxd.node"])
    copyFileSync(path.join(repositoryRoot, "build", file), path.join(directory, file));
  chmodSync(path.join(directory, "sandboxd-exec"), 0o755);
  return {
    script,
    env: {
      SANDBOXD_EXEC_HELPER: path.join(directory, "sandboxd-exec"),
      SANDBOXD_NATIVE_ADDON: path.join(directory, "sandboxd.node"),
    },
    remove: () => rmSync(directory, { recursive: true, force: true }),
  };
}
