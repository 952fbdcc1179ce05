import { existsSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { Launcher } from "../src/process/index.js";
import { startServer } from "../src/server/index.js";
import { startTestServer } from "./support/server.js";

describe("what the server keeps and gives back at startup", () => {
  it("the process manager does not hold the token or the TLS key", async () => {
    const test = await startTestServer({ token: "never-kept-by-the-manager" });
    try {
      const seen = new Set<unknown>();
      const holds = (value: unknown, depth: number): boolean => {
        if (typeof value === "string") return value.includes("never-kept-by-the-manager");
        if (value === null || typeof value !== "object" || depth > 4 || seen.has(value)) return false;
        seen.add(value);
        return Object.values(value).some((inner) => holds(inner, depth + 1));
      };
      expect(holds(test.server.manager, 0)).toBe(false);
    } finally {
      await test.close();
    }
  });

  it("a listen that fails (port taken) shuts the manager down: its cgroups are given back", async () => {
    const first = await startTestServer();
    try {
      const launcher = Launcher.create();
      const directories = (launcher.resources?.procsFiles ?? []).map((file) => file.slice(0, file.lastIndexOf("/")));
      await expect(
        startServer({ port: first.server.port, workspaceRoots: [first.workspace], launcher }),
      ).rejects.toThrow(/EADDRINUSE/);
      for (const directory of directories) expect(existsSync(directory), directory).toBe(false);
    } finally {
      await first.close();
    }
  });
});
