import { describe, expect, it } from "vitest";
import { execSimpleCommand } from "./shell-line.js";

const everything = () => true;

describe("execSimpleCommand", () => {
  it("execs one simple command running a program", () => {
    expect(execSimpleCommand("sleep 100", everything)).toBe("exec sleep 100");
    expect(execSimpleCommand("  ./build.sh --fast", everything)).toBe("exec ./build.sh --fast");
    expect(execSimpleCommand(`python3 -c 'print("a;b|c")'`, everything)).toBe(`exec python3 -c 'print("a;b|c")'`);
    expect(execSimpleCommand(`printenv "$HOME" # why`, everything)).toBe(`exec printenv "$HOME" # why`);
  });

  it("leaves lists, pipes, redirections, subshells and backquotes to the shell", () => {
    for (const line of [
      "sleep 1; sleep 2",
      "make && make test",
      "yes | head",
      "ls > out",
      "cat < in",
      "sleep 1 &",
      "(sleep 1)",
      "ls $(pwd)",
      "ls `pwd`",
      "sleep 1\nsleep 2",
      `echo "open`,
    ]) {
      expect(execSimpleCommand(line, everything)).toBe(line);
    }
  });

  it("leaves builtins, reserved words, assignments and missing programs to the shell", () => {
    for (const line of ["echo 'a\\nb'", "kill -TERM 1", "cd /tmp", "exit 3", "! false", "{ ls; }", "FOO=1 env"]) {
      expect(execSimpleCommand(line, everything)).toBe(line);
    }
    expect(execSimpleCommand("no-such-program", () => false)).toBe("no-such-program");
    expect(execSimpleCommand(`"quoted" word`, everything)).toBe(`"quoted" word`);
  });
});
