import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "./support/server.js";

const root = path.resolve(import.meta.dirname, "..");

/** The ```ts blocks of the README's "Client" section, in order. */
function clientSnippets(): string[] {
  const readme = readFileSync(path.join(root, "README.md"), "utf8");
  const start = readme.indexOf("\n## Client\n");
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end === -1 ? undefined : end);
  return [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1]);
}

/** The lines the snippets say they print: every `// → text` comment, in order. */
function promisedLines(code: string): string[] {
  return [...code.matchAll(/\/\/ → (.*?)(?=\s*\/\/ →|$)/gm)].map((match) => match[1].trim());
}

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

describe("the README's Client section", () => {
  it("has the five examples: exec, streaming, a background process with reconnect, stdin, readiness", () => {
    const code = clientSnippets().join("\n");
    expect(clientSnippets()).toHaveLength(5);
    for (const call of [
      "sandbox.exec(",
      "sandbox.execStream(",
      "sandbox.startProcess(",
      ".reconnect()",
      ".sendInput(",
      "stdin:",
      ".waitForLog(",
      ".waitForPort(",
      ".waitForExit(",
      "sandbox.listPorts(",
    ]) {
      expect(code).toContain(call);
    }
  });

  it("runs as written against a real daemon and prints what its comments say", async () => {
    const code = clientSnippets().join("\n");
    const program = code
      .replaceAll('"sandboxd/client"', JSON.stringify(path.join(root, "src/client/index.ts")))
      .replaceAll('"http://127.0.0.1:7007"', JSON.stringify(t.server.url));
    const dir = mkdtempSync(path.join(tmpdir(), "readme-client-"));
    try {
      const file = path.join(dir, "readme.mts");
      writeFileSync(file, program);
      const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", file], {
        cwd: root,
        timeout: 30_000,
      });
      expect(stdout.trimEnd().split("\n")).toEqual(promisedLines(code));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
