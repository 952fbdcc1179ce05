import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { expect, it } from "vitest";
import fast from "../vitest.fast.config.js";
import { repositoryRoot } from "./support/tools.js";

it("npm run test:fast leaves out exactly the files that need an installed tool, and the README says what npm test installs", () => {
  const excluded = new Set(fast.test?.exclude ?? []);
  for (const name of readdirSync(path.join(repositoryRoot, "test")).filter((file) => file.endsWith(".test.ts"))) {
    const source = readFileSync(path.join(repositoryRoot, "test", name), "utf8");
    const needsTool = /\btool\("/.test(source) || /runCommand\("go"/.test(source);
    if (needsTool) expect(excluded, `${name} needs a tool`).toContain(`test/${name}`);
  }
  expect(excluded).toContain("test/side/**");
  expect(excluded.has("test/exec.test.ts")).toBe(false);
  const readme = readFileSync(path.join(repositoryRoot, "README.md"), "utf8");
  const twoCommands = readme.slice(readme.indexOf("## Two commands"), readme.indexOf("## Install"));
  for (const word of ["npm run test:fast", "apt-get install", "buildah", "Chromium", "go install", "pip", "25 minutes"])
    expect(twoCommands).toContain(word);
  expect(JSON.parse(readFileSync(path.join(repositoryRoot, "package.json"), "utf8")).scripts["test:fast"]).toContain(
    "vitest.fast.config.ts",
  );
});
