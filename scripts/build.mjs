#!/usr/bin/env node
// The package build: TypeScript (src/ and gen/) to JavaScript with declarations in dist/, through
// tsconfig.build.json. `npm run build` and `npm pack` (prepack) run it; `npm ci` in a checkout runs it
// too (prepare; under npm pack and publish, prepare leaves the build to prepack), and there it is skipped with a note when TypeScript is not installed (--omit=dev),
// since a checkout installed without dev dependencies cannot build and may have dist/ from elsewhere.
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const ifPossible = process.argv.includes("--if-possible");
// npm pack and npm publish run prepack (a build) and then prepare too: one build is enough.
if (ifPossible && (process.env.npm_command === "pack" || process.env.npm_command === "publish")) process.exit(0);
let tsc;
try {
  // The package's exports hide bin/; its package.json is exported and bin/tsc sits beside it.
  tsc = path.join(path.dirname(createRequire(import.meta.url).resolve("typescript/package.json")), "bin", "tsc");
} catch {
  if (ifPossible) {
    console.warn("sandboxd: TypeScript is not installed (dev dependencies omitted): dist/ is not rebuilt");
    process.exit(0);
  }
  console.error("sandboxd: the build needs the dev dependencies (npm ci without --omit=dev)");
  process.exit(1);
}
rmSync(path.join(root, "dist"), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, "-p", path.join(root, "tsconfig.build.json")], { stdio: "inherit", cwd: root });
for (const bin of ["dist/src/cli/sandboxd.js", "dist/src/cli/sandbox.js"]) {
  if (existsSync(path.join(root, bin))) chmodSync(path.join(root, bin), 0o755);
}
console.log("sandboxd: dist/ built");
