import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "src/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 30_000,
    // Every test file starts its own real server; two cores run two files at a time.
    pool: "forks",
    maxWorkers: 2,
  },
});
