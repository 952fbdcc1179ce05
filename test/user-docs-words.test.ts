import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { expect, it } from "vitest";
import { repositoryRoot } from "./support/tools.js";

/** Every file a user reads: the READMEs, docs/, and the Python package's sources (its docstrings are its help). */
function userFacingFiles(): string[] {
  const inside = (directory: string, suffix: string) =>
    readdirSync(path.join(repositoryRoot, directory))
      .filter((name) => name.endsWith(suffix))
      .map((name) => path.join(directory, name));
  return [
    "README.md",
    "python/README.md",
    "packages/client/README.md",
    ...inside("docs", ".md"),
    ...inside("python/src/sandboxd", ".py"),
  ];
}

it("user docs and docstrings use no internal words a user cannot resolve (seed 002, issue 10)", () => {
  const found: string[] = [];
  for (const file of userFacingFiles()) {
    const lines = readFileSync(path.join(repositoryRoot, file), "utf8").split("\n");
    lines.forEach((line, index) => {
      if (/\bseeds? \d{3}\b|\bissues? \d+\b/i.test(line)) found.push(`${file}:${index + 1}: ${line.trim()}`);
    });
  }
  expect(found).toEqual([]);
});
