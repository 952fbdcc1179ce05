#!/usr/bin/env node
// Builds sandboxd's native parts with the machine's C compiler; run by npm at install:
//   native/sandboxd-exec.c -> build/sandboxd-exec   the helper every command starts through
//   native/addon.c         -> build/sandboxd.node   a Node-API addon (posix_spawn, ptys, malloc_trim),
//   native/files.c            with the file calls of src/files (openat2, *at calls as the --user user, inotify)
// A machine without a compiler still gets a working daemon: it warns at start, refuses --user, leaks
// the fds it inherited into commands, and keeps freed memory (see src/process/native/exec-helper.ts, native.ts).
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const build = path.join(root, "build");
mkdirSync(build, { recursive: true });
const compiler = process.env.CC || "cc";
const flags = ["-O2", "-Wall", "-Wextra", "-Werror"];

function compile(what, args) {
  try {
    execFileSync(compiler, [...flags, ...args], { stdio: "inherit" });
    return true;
  } catch (error) {
    console.warn(`sandboxd: could not build ${what} with ${compiler} (${error.message})`);
    return false;
  }
}

if (
  !compile("build/sandboxd-exec", [
    "-o",
    path.join(build, "sandboxd-exec"),
    path.join(root, "native", "sandboxd-exec.c"),
  ])
) {
  console.warn("sandboxd: the daemon will run without it: no --user, and inherited fds reach commands");
}
let headers;
try {
  headers = path.join(path.dirname(createRequire(import.meta.url).resolve("node-api-headers/package.json")), "include");
} catch {
  console.warn("sandboxd: node-api-headers is missing: the addon is not built");
}
if (headers !== undefined) {
  // Node-API symbols resolve against the node binary at load time.
  compile("build/sandboxd.node", [
    "-shared",
    "-fPIC",
    "-DNAPI_VERSION=8",
    "-I",
    headers,
    "-o",
    path.join(build, "sandboxd.node"),
    path.join(root, "native", "addon.c"),
    path.join(root, "native", "files.c"),
  ]);
}
