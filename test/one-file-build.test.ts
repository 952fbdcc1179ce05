import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { repositoryRoot, runCommand } from "./support/tools.js";

const out = mkdtempSync(path.join(tmpdir(), "sandboxd-one-file-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

it("build:one-file prints one line, no postject warnings, and the daemon it writes runs", {
  timeout: 240_000,
}, async () => {
  const binary = path.join(out, "sandboxd");
  const built = await runCommand(
    process.execPath,
    [path.join(repositoryRoot, "scripts/build-one-file.mjs"), "--out", binary],
    { timeoutMs: 200_000 },
  );
  expect(built.code, built.stderr).toBe(0);
  expect(built.stderr).toBe("");
  expect(built.stdout).toMatch(/^sandboxd: wrote .*sandboxd \(\d+ MiB, Node v[\d.]+\)\n$/);
  const version = await runCommand(binary, ["--version"], { timeoutMs: 60_000 });
  expect(version.stdout).toMatch(/^sandboxd \d+\.\d+\.\d+/);
});
