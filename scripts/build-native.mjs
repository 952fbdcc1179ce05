#!/usr/bin/env node
// Builds native/sandboxd-exec.c into build/sandboxd-exec with the machine's C compiler; run by npm at
// install. A machine without a compiler still gets a working daemon: it warns at start, refuses --user
// and leaks the fds it inherited into commands (see src/process/exec-helper.ts).
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const output = path.join(root, "build", "sandboxd-exec");
mkdirSync(path.dirname(output), { recursive: true });
const compiler = process.env.CC || "cc";
try {
  execFileSync(compiler, ["-O2", "-Wall", "-Wextra", "-Werror", "-o", output, path.join(root, "native", "sandboxd-exec.c")], {
    stdio: "inherit",
  });
} catch (error) {
  console.warn(`sandboxd: could not build ${path.relative(root, output)} with ${compiler} (${error.message});`);
  console.warn("sandboxd: the daemon will run without it: no --user, and inherited fds reach commands");
}
