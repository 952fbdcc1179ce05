import { describe, expect, it } from "vitest";
import { execSimpleCommand, plainCommandWords } from "./shell-line.js";

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

describe("plainCommandWords", () => {
  it("splits a line of plain words as the shell would", () => {
    expect(plainCommandWords("ls -la /tmp")).toEqual(["ls", "-la", "/tmp"]);
    expect(plainCommandWords("  python3\t-m   http.server 8080 ")).toEqual(["python3", "-m", "http.server", "8080"]);
    expect(plainCommandWords("dd if=/dev/zero of=out bs=1M count=1")).toEqual([
      "dd",
      "if=/dev/zero",
      "of=out",
      "bs=1M",
      "count=1",
    ]);
    expect(plainCommandWords("./build.sh --jobs=2 user@host:path,x+y%z")).toEqual([
      "./build.sh",
      "--jobs=2",
      "user@host:path,x+y%z",
    ]);
  });

  it("leaves to the shell every line whose words it would read: builtins, assignments, quotes, expansions, globs, operators", () => {
    for (const line of [
      "",
      "   ",
      "true",
      "echo hi",
      "cd /tmp",
      "FOO=1 env",
      "ls '/tmp'",
      'ls "a b"',
      "ls a\\ b",
      "ls $HOME",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, written as the shell reads it
      "ls ${HOME}",
      "ls *.txt",
      "ls file?",
      "ls [ab]",
      "ls ~",
      "ls ~/x",
      "ls # comment",
      "ls; ls",
      "ls | wc",
      "ls > out",
      "ls &",
      "sleep 1\nsleep 2",
      "ls `pwd`",
      "ls {a,b}",
      "ls !x",
      "caf\u00e9 x",
      // dash splits at spaces and tabs only: these stay in the word, which then names no program.
      "ls\r",
      "\u00a0ls",
      "\ufeffls",
    ]) {
      expect(plainCommandWords(line), line).toBeUndefined();
    }
  });
});
