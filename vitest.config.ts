import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "src/**/*.test.ts"],
    // Generous: a test that passes only on a quiet machine is a defect, and the CLI tests start the CLI from
    // source (tsx) several times each, seconds apiece with both cores busy.
    testTimeout: 180_000,
    hookTimeout: 30_000,
    // Every test file starts its own real server; two cores run two files at a time.
    pool: "forks",
    maxWorkers: 2,
  },
});
