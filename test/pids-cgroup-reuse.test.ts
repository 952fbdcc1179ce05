import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { PidsCgroup } from "../src/process/index.js";

const pids = process.getuid?.() === 0 ? PidsCgroup.detect() : undefined;
let made: PidsCgroup | undefined;
afterEach(() => made?.close());

/** Runs `sh -c` in the cgroup whose `cgroup.procs` is given, and waits for it. */
function runIn(procsFile: string, line: string): void {
  const run = spawnSync("/bin/sh", ["-c", `echo $$ > '${procsFile}' && ${line}`], { encoding: "utf8" });
  expect(run.status, run.stderr).toBe(0);
}

describe.skipIf(pids === undefined)("per-command pids cgroups", () => {
  it("keeps a drained one for the next command and makes its directory again after a close", async () => {
    made = pids!;
    const first = made.create(64);
    runIn(first.procsFile, "true");
    await made.remove(first.directory);
    // Kept, with its cap: the next command with the same cap gets it back.
    expect(existsSync(first.directory)).toBe(true);
    expect(made.create(64).directory).toBe(first.directory);
    await made.remove(first.directory);
    made.close();
    expect(existsSync(made.directory)).toBe(false);
    // A launcher may outlive one manager: the next command finds its cgroup made again.
    const again = made.create(32);
    expect(existsSync(again.directory)).toBe(true);
    expect(readFileSync(path.join(again.directory, "pids.max"), "utf8").trim()).toBe("32");
    runIn(again.procsFile, "true");
    await made.remove(again.directory);
  });
});
