import { mkdtempSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { resolveCommand, type CommandContext } from "./command.js";

const cwd = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-command-")));
const link = path.join(realpathSync(tmpdir()), `sandboxd-command-link-${process.pid}`);
symlinkSync(cwd, link);
afterAll(() => {
  rmSync(link, { force: true });
  rmSync(cwd, { recursive: true, force: true });
});

const context: CommandContext = {
  id: "p",
  cwd,
  identity: undefined,
  ownUser: { name: "someone", uid: 1000, gid: 1000, home: "/home/someone" },
  baseEnvironment: { PATH: "/usr/local/bin:/usr/bin:/bin" },
};

describe("resolveCommand", () => {
  it("runs a command line of plain words without the shell, with the PWD the shell would export", () => {
    const command = resolveCommand({ command: "ls -la /tmp" }, context);
    expect([command.file, ...command.argv]).toEqual(["ls", "-la", "/tmp"]);
    expect(command.shell).toBe(false);
    expect(command.found).toBe(true);
    expect(command.env.PWD).toBe(cwd);
    // The record keeps the line as it was sent.
    expect(command.description.command).toBe("ls -la /tmp");
    expect(command.description.args).toEqual([]);
  });

  it("keeps an inherited PWD that names the working directory, as dash does, and replaces one that does not", () => {
    expect(resolveCommand({ command: "ls", env: { PWD: link } }, context).env.PWD).toBe(link);
    expect(resolveCommand({ command: "ls", env: { PWD: "/" } }, context).env.PWD).toBe(cwd);
    expect(resolveCommand({ command: "ls", env: { PWD: "relative" } }, context).env.PWD).toBe(cwd);
  });

  it("leaves to the shell what it must read, and a program it would not find", () => {
    for (const line of ["ls $HOME", "true", "ls *.txt", "FOO=1 env", "no-such-program-here --x"]) {
      const command = resolveCommand({ command: line }, context);
      expect(command.file, line).toBe("/bin/sh");
      expect(command.shell).toBe(true);
      expect(command.found).toBe(false);
      expect(command.env.PWD).toBeUndefined();
    }
  });

  it("runs argv commands as given, looked up at the start", () => {
    const command = resolveCommand({ command: "ls", args: ["-la"] }, context);
    expect([command.file, ...command.argv]).toEqual(["ls", "-la"]);
    expect(command.found).toBe(false);
    expect(command.env.PWD).toBeUndefined();
  });
});
