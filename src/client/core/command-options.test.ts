import { describe, expect, it } from "vitest";
import { checkOptions, commandOptionNames, toProcessSpec, type CommandDefaults } from "./command-options.js";

const defaults: CommandDefaults = { sessionId: "s1", timeoutMs: 30_000, workspace: ["/work", "/other"] };

describe("toProcessSpec", () => {
  it("fills the sandbox's defaults and joins a relative cwd to the first workspace directory", () => {
    const spec = toProcessSpec("ls", { cwd: "src", timeoutMs: 1500.2 }, defaults);
    expect(spec).toMatchObject({
      command: "ls",
      args: [],
      cwd: "/work/src",
      timeoutMs: 1501,
      sessionId: "s1",
      stdin: false,
      sudo: false,
    });
    expect(toProcessSpec("ls", { cwd: "/tmp" }, defaults).cwd).toBe("/tmp");
    expect(toProcessSpec("ls", {}, defaults).cwd).toBe("/work");
    expect(toProcessSpec("ls", {}, { ...defaults, workspace: [] }).cwd).toBe("");
  });

  it("turns input text into stdin bytes and `pty: true` into a PTY of the daemon's default size", () => {
    const spec = toProcessSpec("cat", { input: "hé", pty: true }, defaults);
    expect(spec.stdinData).toEqual(new TextEncoder().encode("hé"));
    expect(spec.pty).toEqual({ cols: 0, rows: 0, term: "" });
    expect(toProcessSpec("cat", { pty: { cols: 120, rows: 40, term: "xterm" } }, defaults).pty).toEqual({
      cols: 120,
      rows: 40,
      term: "xterm",
    });
    expect(toProcessSpec("cat", { pty: false }, defaults).pty).toBeUndefined();
  });

  it("sends a command's limits in the daemon's units: bytes, thousandths of a CPU, a weight, tasks", () => {
    const spec = toProcessSpec(
      "make",
      { limits: { memoryBytes: 256 * 1024 * 1024, cpus: 0.5, cpuWeight: 50, maxTasks: 100 } },
      defaults,
    );
    expect(spec.limits).toEqual({ memoryBytes: 268_435_456n, cpuMillis: 500, cpuWeight: 50, maxTasks: 100 });
    expect(toProcessSpec("make", {}, defaults).limits).toBeUndefined();
    const refusal = (limits: object) => {
      try {
        toProcessSpec("make", { limits } as never, defaults);
      } catch (error) {
        return (error as Error).message;
      }
      return "accepted";
    };
    expect(refusal({ cpus: -1 })).toMatch(/limits.cpus must be a positive number/);
    expect(refusal({ memoryBytes: 1.5 })).toMatch(/limits.memoryBytes must be a whole number/);
    expect(refusal({ memory: 5 })).toMatch(/unknown option memory/);
  });

  it("refuses what the daemon would refuse, before any call, with INVALID_ARGUMENT", () => {
    const refused = (options: object, command: unknown = "true") => {
      try {
        toProcessSpec(command as string, options, defaults);
      } catch (error) {
        return error;
      }
      return undefined;
    };
    for (const options of [
      { timeoutMs: -1 },
      { timeoutMs: 2 ** 31 },
      { args: [1] },
      { stdin: "text" },
      { input: 5 },
      { pty: { cols: 10_001 } },
      { input: new Uint8Array(8 * 1024 * 1024 + 1) },
    ]) {
      // Named by its option alone: stringifying an 8 MiB array takes a busy machine minutes.
      expect(refused(options), Object.keys(options).join()).toMatchObject({
        name: "SandboxError",
        code: "INVALID_ARGUMENT",
      });
    }
    expect(refused({}, 42)).toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringMatching(/command must be a string/),
    });
  });
});

describe("checkOptions", () => {
  it("refuses a field the API does not take, as another API spells it, and options that are not an object", () => {
    expect(() => checkOptions({ timeout: 5 }, commandOptionNames, "exec")).toThrow(/timeout/);
    expect(() => checkOptions([], commandOptionNames, "exec")).toThrow(/must be an object/);
    expect(() => checkOptions({ timeoutMs: 5 }, commandOptionNames, "exec")).not.toThrow();
    expect(() => checkOptions(undefined, commandOptionNames, "exec")).not.toThrow();
  });
});
