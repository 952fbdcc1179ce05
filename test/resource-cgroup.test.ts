import { readFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Launcher } from "../src/process/index.js";
import { collectExec } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const probe = Launcher.create({ resources: { memoryBytes: 64 * 1024 * 1024 } });
const limited = probe.resources?.applied.memoryBytes !== undefined;
probe.close();

describe.skipIf(!limited)("commands live under a memory and CPU parent of their own", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("a memory hog is killed inside the commands' group and the daemon serves on; CPU weight is half the daemon's", async () => {
    const launcher = Launcher.create({ resources: { memoryBytes: 64 * 1024 * 1024 } });
    test = await startTestServer({ launcher });
    const directories = launcher.resources!.procsFiles.map((file) => path.dirname(file));
    const memory = directories.find((directory) => directory.includes("/memory/"))!;
    expect(readFileSync(path.join(memory, "memory.limit_in_bytes"), "utf8").trim()).toBe(String(64 * 1024 * 1024));
    const cpu = directories.find((directory) => directory.includes("/cpu"));
    if (cpu !== undefined) expect(readFileSync(path.join(cpu, "cpu.shares"), "utf8").trim()).toBe("512");

    const where = await collectExec(test.client, { command: "cat /proc/self/cgroup" });
    for (const directory of directories) expect(where.stdout.toString()).toContain(path.basename(directory));

    const hog = await collectExec(test.client, {
      command: "python3",
      args: ["-c", "x = bytearray(300 * 1024 * 1024); print(len(x))"],
    });
    expect(hog.exited.signal).toBe("SIGKILL");
    expect(hog.stdout.toString()).toBe("");
    expect((await collectExec(test.client, { command: "echo alive" })).stdout.toString()).toBe("alive\n");
  });
});
