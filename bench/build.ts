import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "./daemon.js";

/** Where {@link buildDaemon} writes the compiled daemon (ignored by git, inside the repo so node_modules resolves). */
export const buildDirectory = path.join(repoRoot, "bench/.tools/dist");

/**
 * Compiles the sources with the project's `tsc` into {@link buildDirectory} and returns the path of
 * the compiled `sandboxd.js`: the daemon as deployed (package.json `bin`), without a TypeScript
 * loader in its start time or memory. Type errors elsewhere in the tree do not stop the emit.
 */
export function buildDaemon(): string {
  const tsc = path.join(repoRoot, "node_modules/typescript/bin/tsc");
  const result = spawnSync(
    process.execPath,
    [tsc, "-p", path.join(repoRoot, "tsconfig.json"), "--outDir", buildDirectory, "--declaration", "false", "--sourceMap", "false", "--noEmit", "false"],
    { cwd: repoRoot, encoding: "utf8" },
  );
  const entry = path.join(buildDirectory, "src/cli/sandboxd.js");
  if (!existsSync(entry)) throw new Error(`tsc did not emit ${entry}: ${result.stdout}${result.stderr}`);
  return entry;
}
