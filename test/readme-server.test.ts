import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "..");

/** The ```ts block of the README's "Embedding the server" section. */
function embeddingSnippet(): string {
  const readme = readFileSync(path.join(root, "README.md"), "utf8");
  const start = readme.indexOf("\n## Embedding the server\n");
  const end = readme.indexOf("\n## ", start + 1);
  const blocks = [...readme.slice(start, end).matchAll(/```ts\n([\s\S]*?)```/g)];
  expect(start).toBeGreaterThan(0);
  expect(blocks).toHaveLength(1);
  return blocks[0][1];
}

describe("the README's Embedding the server section", () => {
  it("runs as written, prints what its comment says and exits on its own (nothing left open)", async () => {
    const code = embeddingSnippet();
    const program = code
      .replaceAll('"sandboxd/server"', JSON.stringify(path.join(root, "src/server/index.ts")))
      .replaceAll('"sandboxd/client"', JSON.stringify(path.join(root, "src/client/index.ts")));
    const dir = mkdtempSync(path.join(tmpdir(), "readme-server-"));
    try {
      const file = path.join(dir, "embed.mts");
      writeFileSync(file, program);
      const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", file], {
        cwd: root,
        timeout: 30_000,
      });
      const promised = [...code.matchAll(/\/\/ → (.*)$/gm)].map((match) => match[1].trim());
      expect(stdout.trimEnd().split("\n")).toEqual(promised);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
