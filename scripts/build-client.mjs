#!/usr/bin/env node
// The client package's build: src/client/index.ts and everything it imports (the client, the shared leaves it
// uses, the generated messages) to JavaScript with declarations in packages/client/dist, through
// tsconfig.client.json, plus the license. `npm pack` in packages/client (prepack) and `npm run build:client` run it.
import { execFileSync } from "node:child_process";
import { copyFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = path.join(root, "packages/client");
const tsc = path.join(path.dirname(createRequire(import.meta.url).resolve("typescript/package.json")), "bin", "tsc");
rmSync(path.join(out, "dist"), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, "-p", path.join(root, "tsconfig.client.json")], { stdio: "inherit", cwd: root });
copyFileSync(path.join(root, "LICENSE"), path.join(out, "LICENSE"));

// The daemon must not come along: the client imports neither src/process nor src/server (test/layering.test.ts).
const files = (directory) =>
  readdirSync(directory).flatMap((name) => {
    const file = path.join(directory, name);
    return statSync(file).isDirectory() ? files(file) : [path.relative(out, file)];
  });
const daemonFiles = files(path.join(out, "dist")).filter((file) =>
  /^dist\/src\/(process|server|cli|files)\//.test(file),
);
if (daemonFiles.length > 0) throw new Error(`the client package would ship daemon code: ${daemonFiles.join(", ")}`);
