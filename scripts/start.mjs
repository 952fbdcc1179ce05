#!/usr/bin/env node
// `npm start`: runs the built daemon in this process (the npm script execs node, so the SIGTERM or
// SIGINT npm passes on reaches the daemon itself). dist/ is built by `npm ci` (prepare) or `npm run build`.
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const entry = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../dist/src/cli/sandboxd.js");
if (!existsSync(entry)) {
  console.error(
    "sandboxd: dist/ is not built: run `npm ci` (it builds) or `npm run build` (needs the dev dependencies)",
  );
  process.exit(1);
}
// Restart with the daemon's Node flags here, before the daemon loads: this file is the main script.
const { relaunchWithNodeFlags } = await import(
  pathToFileURL(path.join(path.dirname(entry), "sandboxd", "relaunch.js")).href
);
relaunchWithNodeFlags(fileURLToPath(import.meta.url));
await import(pathToFileURL(entry).href);
