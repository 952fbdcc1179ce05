import { describe, expect, it } from "vitest";
import { loadNativeAddon } from "../src/process/index.js";
import { commandLine } from "./support/processes.js";

const addon = loadNativeAddon();

// The tests find their processes by command line, right after a start returned: the helper that reads
// it must not miss a process whose exec is still setting up its arguments.
describe.skipIf(addon === null)("commandLine", () => {
  it("reads the new program's arguments of a process the addon just started, every time", async () => {
    const misses: string[] = [];
    for (let i = 0; i < 300; i++) {
      const { pid } = await addon!.spawnAsync("/bin/sleep", ["sleep", "1000.5"], [], {
        stdin: false,
        statusFd: false,
        cgroups: [],
      });
      try {
        const text = commandLine(pid);
        if (text !== "sleep\u00001000.5\u0000") misses.push(`${pid}: ${JSON.stringify(text)}`);
      } finally {
        process.kill(pid, "SIGKILL");
      }
    }
    expect(misses).toEqual([]);
  });
});
