import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { installCliShim } from "./support/cli.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { repositoryRoot, runCommand, tool } from "./support/tools.js";

/** The README's "Files" section. */
function section(): string {
  const readme = readFileSync(path.join(repositoryRoot, "README.md"), "utf8");
  const start = readme.indexOf("\n## Files\n");
  expect(start).toBeGreaterThan(0);
  const end = readme.indexOf("\n## ", start + 1);
  return readme.slice(start, end < 0 ? undefined : end);
}

/** The blocks of one language in the section, in order. */
const blocks = (language: string) =>
  [...section().matchAll(new RegExp(`\`\`\`${language}\\n([\\s\\S]*?)\`\`\``, "g"))].map((match) => match[1]);

/** The lines a block says it prints: every `// → text` or `# → text` comment, in order. */
function promisedLines(code: string, marker: string): string[] {
  return [...code.matchAll(new RegExp(`${marker} → (.*?)(?=\\s*${marker} →|$)`, "gm"))].map((match) => match[1].trim());
}

let t: TestServer;
let dir: string;
beforeAll(async () => {
  tool("grpcurl");
  t = await startTestServer();
  dir = mkdtempSync(path.join(tmpdir(), "files-readme-"));
  installCliShim(dir);
});
afterAll(async () => {
  await t.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the README's Files section, as written", () => {
  it("has TypeScript, Python, CLI, grpcurl and curl examples", () => {
    expect(blocks("ts")).toHaveLength(3);
    expect(blocks("python")).toHaveLength(1);
    const shell = blocks("sh");
    expect(shell).toHaveLength(3);
    expect(shell[0]).toContain("sandbox cp");
    expect(shell[0]).toContain("sandbox ls");
    expect(shell[1]).toContain("grpcurl");
    expect(shell[2]).toContain("curl -sS");
    for (const call of [
      "sandbox.files.write(",
      "sandbox.files.read(",
      "sandbox.files.list(",
      "sandbox.files.watch(",
      "FileNotFoundError",
    ]) {
      expect(blocks("ts").join("\n")).toContain(call);
    }
  });

  it("runs the TypeScript blocks as one program, printing what their comments say", async () => {
    const code = blocks("ts").join("\n");
    const program = code
      .replaceAll('"sandboxd/client"', JSON.stringify(path.join(repositoryRoot, "src/client/index.ts")))
      .replaceAll('"http://127.0.0.1:7007"', JSON.stringify(t.server.url));
    const file = path.join(dir, "files.mts");
    writeFileSync(file, program);
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", file], {
      cwd: repositoryRoot,
      timeout: 60_000,
    });
    expect(stdout.trimEnd().split("\n")).toEqual(promisedLines(code, "//"));
  });

  for (const [index, name] of ["CLI", "grpcurl", "curl"].entries()) {
    it(`runs the ${name} block, printing what its comments say`, async () => {
      const block = blocks("sh")[index];
      const script = block.replaceAll("127.0.0.1:7007", `127.0.0.1:${t.server.port}`);
      const result = await runCommand("bash", ["-e", "-o", "pipefail", "-c", script], {
        cwd: dir,
        env: {
          PATH: `${dir}:${path.join(repositoryRoot, ".tools/bin")}:${process.env.PATH}`,
          SANDBOXD_URL: t.server.url,
          SANDBOXD_TOKEN: "",
          SANDBOX_URL: undefined,
          SANDBOX_TOKEN: undefined,
        },
        timeoutMs: 120_000,
      });
      expect(result.stderr).toBe("");
      expect(result.code).toBe(0);
      expect(
        result.stdout
          .trimEnd()
          .split("\n")
          .map((line) => line.trim()),
      ).toEqual(promisedLines(block, "#"));
    });
  }
});
