import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig, mergeConfig } from "vitest/config";
import base from "./vitest.config.js";

/**
 * `npm run test:fast`: the vitest suite without the files that need what `npm test` installs first
 * (grpcurl, the Go toolchain's example, the Python venv of test/setup-tools.sh), and without the side
 * suites (test/side/: apt-get, buildah, Chromium, a second Node). Found by what each file uses, so
 * a new file that needs a tool leaves the fast run by itself.
 */
const testDirectory = fileURLToPath(new URL("./test/", import.meta.url));
const needsTools = readdirSync(testDirectory)
  .filter((name) => name.endsWith(".test.ts"))
  .filter((name) =>
    /\btool\(|\btoolsBin\b|\bvenvPython\b|runCommand\("go"/.test(readFileSync(testDirectory + name, "utf8")),
  )
  .map((name) => `test/${name}`);

export default mergeConfig(
  base,
  defineConfig({ test: { exclude: ["**/node_modules/**", "test/side/**", ...needsTools] } }),
);
