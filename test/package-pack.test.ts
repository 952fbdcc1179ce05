import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repositoryRoot, runCommand } from "./support/tools.js";

let tree: string;
beforeAll(() => {
  // A copy of the tracked files, so the build does not touch the dist/ other tests use.
  tree = mkdtempSync(path.join(tmpdir(), "sandboxd-pack-"));
  const files = execFileSync("git", ["ls-files", "-z"], { cwd: repositoryRoot, encoding: "utf8" })
    .split("\0")
    .filter(Boolean);
  for (const file of files)
    if (existsSync(path.join(repositoryRoot, file)))
      cpSync(path.join(repositoryRoot, file), path.join(tree, file), { recursive: true });
  symlinkSync(path.join(repositoryRoot, "node_modules"), path.join(tree, "node_modules"));
  if (existsSync(path.join(repositoryRoot, "build")))
    cpSync(path.join(repositoryRoot, "build"), path.join(tree, "build"), { recursive: true });
});
afterAll(() => rmSync(tree, { recursive: true, force: true }));

describe("npm pack, as a user types it in a checkout", { timeout: 240_000 }, () => {
  it("builds once and writes the tarball into dist/, not beside package.json", async () => {
    const packed = await runCommand("npm", ["pack", "--foreground-scripts"], { cwd: tree, timeoutMs: 200_000 });
    expect(packed.code, packed.stderr).toBe(0);
    const output = packed.stdout + packed.stderr;
    // prepack builds; prepare, which npm pack runs too, leaves it to prepack.
    expect(output.match(/^sandboxd: dist\/ built$/gm)).toHaveLength(1);
    expect(readdirSync(tree).filter((name) => name.endsWith(".tgz"))).toEqual([]);
    expect(existsSync(path.join(tree, "dist", "sandboxd-0.1.0.tgz"))).toBe(true);
  });

  it("the client's package too: its tarball lands in packages/client/dist/", async () => {
    const client = path.join(tree, "packages", "client");
    const packed = await runCommand("npm", ["pack"], { cwd: client, timeoutMs: 200_000 });
    expect(packed.code, packed.stderr).toBe(0);
    expect(readdirSync(client).filter((name) => name.endsWith(".tgz"))).toEqual([]);
    expect(readdirSync(path.join(client, "dist")).filter((name) => name.endsWith(".tgz"))).toHaveLength(1);
  });
});
