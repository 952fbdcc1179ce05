import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { installCliShim } from "./support/cli.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { repositoryRoot, runCommand } from "./support/tools.js";

/** The ```sh blocks of the README's "From a terminal" section, in order. */
function sectionBlocks(): string[] {
  const readme = readFileSync(path.join(repositoryRoot, "README.md"), "utf8");
  const start = readme.indexOf("\n## From a terminal\n");
  expect(start).toBeGreaterThan(0);
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]);
}

/** The lines a block says it prints: every `# → text` comment, in order. */
function promisedLines(block: string): string[] {
  return [...block.matchAll(/# → (.*?)(?=\s*# →|$)/gm)].map((match) => match[1].trim());
}

let t: TestServer;
let dir: string;
beforeAll(async () => {
  t = await startTestServer();
  dir = mkdtempSync(path.join(tmpdir(), "sandbox-cli-readme-"));
  installCliShim(dir);
});
afterAll(async () => {
  await t.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the README's From a terminal section, as written", () => {
  const blocks = sectionBlocks();

  it("has the exec, stdin and timeout, and background process examples, each promising output", () => {
    expect(blocks).toHaveLength(4);
    const all = blocks.join("\n");
    for (const command of [
      "sandbox exec --",
      "sandbox exec -i",
      "--timeout",
      "sandbox start",
      "sandbox logs -f",
      "--from-offset",
      "sandbox ps -o json",
      "sandbox kill -s",
      "sandbox attach",
      "sandbox wait log",
      "sandbox wait port",
      "sandbox wait exit",
      "sandbox ports",
    ]) {
      expect(all).toContain(command);
    }
    for (const block of blocks) expect(promisedLines(block).length).toBeGreaterThan(0);
  });

  for (const [index, block] of blocks.entries()) {
    it(`block ${index + 1} prints what its comments say`, async () => {
      const result = await runCommand("/bin/sh", ["-c", block], {
        cwd: dir,
        env: {
          PATH: `${dir}:${process.env.PATH}`,
          SANDBOXD_URL: t.server.url,
          SANDBOXD_TOKEN: "",
          SANDBOX_URL: undefined,
          SANDBOX_TOKEN: undefined,
        },
        timeoutMs: 60_000,
      });
      expect(result.stderr).toBe("");
      expect(result.stdout.trimEnd().split("\n")).toEqual(promisedLines(block));
    });
  }
});

describe("the README's alias for a checkout", () => {
  it("runs the built CLI with node (not tsx, which took 5-10 s a call), from any directory", async () => {
    const readme = readFileSync(path.join(repositoryRoot, "README.md"), "utf8");
    const alias = /`alias sandbox="([^"`]+)"`/.exec(readme);
    expect(alias, "the README defines the alias").not.toBeNull();
    expect(alias![1]).not.toMatch(/tsx/);
    // As the shell expands it where the README says to define it: in the checkout's directory.
    const words = alias![1].replaceAll("$PWD", repositoryRoot).split(" ");
    const result = await runCommand(
      words[0] === "node" ? process.execPath : words[0],
      [...words.slice(1), "--version"],
      { cwd: dir },
    );
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(
      JSON.parse(readFileSync(path.join(repositoryRoot, "package.json"), "utf8")).version,
    );
  });
});
