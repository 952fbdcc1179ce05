import { describe, expect, it } from "vitest";
import { parseHelperStatus, startStageOfHelperStep } from "./exec-helper.js";

describe("the helper's start report", () => {
  it("names the stage of the start each step of the helper belongs to", () => {
    expect(
      [
        "cgroup",
        "nproc",
        "trace",
        "groups",
        "setgid",
        "setuid",
        "tty",
        "cwd",
        "exec",
        "environment",
        "usage",
        "status",
      ].map(startStageOfHelperStep),
    ).toEqual(["cgroup", "limits", "limits", "user", "user", "user", "user", "cwd", "exec", "spawn", "spawn", "spawn"]);
  });

  it("reads the step and the errno's name from the status line", () => {
    expect(parseHelperStatus("setuid 1\n")).toMatchObject({ stage: "setuid", code: "EPERM" });
    expect(parseHelperStatus("exec 2\n")).toMatchObject({ stage: "exec", code: "ENOENT" });
    expect(parseHelperStatus("")).toBeUndefined();
  });
});
