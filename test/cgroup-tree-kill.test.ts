import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants, existsSync, readFileSync, rmdirSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CommandCgroup } from "../src/process/cgroups/index.js";
import { waitFor } from "./support/processes.js";

/** A writable cgroup mount of `fsType` (with `option` among its super options, for v1), or undefined. */
function writableMount(fsType: "cgroup2" | "cgroup", option?: string): string | undefined {
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const [mountFields, fsFields] = line.split(" - ");
    const [type, , superOptions = ""] = fsFields?.split(" ") ?? [];
    if (type !== fsType || (option !== undefined && !superOptions.split(",").includes(option))) continue;
    const mountPoint = mountFields.split(" ")[4];
    try {
      accessSync(mountPoint, constants.W_OK);
    } catch {
      continue;
    }
    return mountPoint;
  }
  return undefined;
}

const members = (directory: string) =>
  readFileSync(path.join(directory, "cgroup.procs"), "utf8").split("\n").filter(Boolean);

/** The freezers a tree kill can use here: cgroup v2's (`cgroup.freeze`) and the v1 freezer hierarchy's (`freezer.state`). */
const freezers = [
  { name: "cgroup v2 (cgroup.freeze)", mount: writableMount("cgroup2"), file: "cgroup.freeze", thawed: "0" },
  {
    name: "cgroup v1 (freezer.state)",
    mount: writableMount("cgroup", "freezer"),
    file: "freezer.state",
    thawed: "THAWED",
  },
];

describe.each(freezers)("a tree kill without cgroup.kill, with the $name freezer", ({ mount, file, thawed }) => {
  const made: string[] = [];
  afterEach(() => {
    for (const directory of made.splice(0)) {
      if (!existsSync(directory)) continue;
      for (const pid of members(directory)) process.kill(Number(pid), "SIGKILL");
      try {
        rmdirSync(directory);
      } catch {
        // Its last tasks are still leaving: a later daemon's sweep removes it.
      }
    }
  });

  it.skipIf(mount === undefined || process.getuid?.() !== 0)(
    "freezes a tree that keeps forking, kills every member and thaws it: nothing is left",
    async () => {
      const directory = path.join(mount!, `sandboxd-test-freeze-${randomBytes(4).toString("hex")}`);
      made.push(directory);
      // A kernel with cgroup.kill too: the plan leaves it out, as on Linux 5.2 to 5.13 (and v1 has none).
      const cgroup = CommandCgroup.create({
        directories: [directory],
        writes: [],
        procsFiles: [path.join(directory, "cgroup.procs")],
        usage: [],
        freezeFile: path.join(directory, file),
      });
      // Joins the cgroup, then four loops start long sleepers without pause, each in a session of its own
      // (out of the process group, as a double-forked daemon is): only the cgroup still holds them all.
      const script = `echo $$ > "$1"; for i in 1 2 3 4; do setsid sh -c 'while :; do sleep 100 & sleep 0.005; done' & done; wait`;
      const tree = spawn("sh", ["-c", script, "sh", path.join(directory, "cgroup.procs")], { stdio: "ignore" });
      tree.on("error", () => {});
      await waitFor(() => members(directory).length >= 20, { what: "the tree to grow", timeoutMs: 30_000 });

      expect(cgroup.kill()).toBe("freeze");
      expect(readFileSync(path.join(directory, file), "utf8").trim()).toBe(thawed);
      await waitFor(() => members(directory).length === 0, { what: "every member to die", timeoutMs: 10_000 });
      await cgroup.remove();
      expect(existsSync(directory)).toBe(false);
    },
  );
});
