/**
 * The words `/bin/sh` runs itself (dash's builtins, POSIX's special builtins and reserved words): a
 * line starting with one is left alone, since `exec` would run a program of the same name, or none.
 */
const shellOwnWords = new Set([
  "!",
  "{",
  "}",
  ".",
  ":",
  "[",
  "alias",
  "bg",
  "break",
  "case",
  "cd",
  "chdir",
  "command",
  "continue",
  "do",
  "done",
  "echo",
  "elif",
  "else",
  "esac",
  "eval",
  "exec",
  "exit",
  "export",
  "false",
  "fc",
  "fg",
  "fi",
  "for",
  "getopts",
  "hash",
  "if",
  "in",
  "jobs",
  "kill",
  "local",
  "printf",
  "pwd",
  "read",
  "readonly",
  "return",
  "set",
  "shift",
  "test",
  "then",
  "times",
  "trap",
  "true",
  "type",
  "ulimit",
  "umask",
  "unalias",
  "unset",
  "until",
  "wait",
  "while",
]);

/**
 * Whether a line is one simple command: no operator, subshell, redirection, newline or backquote
 * outside quotes (inside them, they are text).
 */
function isSimpleCommand(line: string): boolean {
  let quote: "'" | '"' | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote === "'") {
      if (c === "'") quote = undefined;
    } else if (c === "\\") {
      i++;
    } else if (quote === '"') {
      if (c === '"') quote = undefined;
    } else if (c === "'" || c === '"') {
      quote = c;
    } else if (";&|<>()`\n\r".includes(c)) {
      return false;
    }
  }
  return quote === undefined;
}

/** A first word that is plainly a program name or path: no quoting, expansion or assignment. */
const plainProgram = /^[\w./+@%:,-]+$/;

/**
 * Prefixes a shell command line with `exec` when it is one simple command running a program that
 * exists (`canExec` says so), so that the shell becomes the program instead of waiting for it.
 * `/bin/sh` (dash) forks even for `sh -c "sleep 100"`, and then reports a program killed by SIGTERM
 * as its own exit code 143: with `exec` the program is the process the daemon watches, and its
 * signal is reported as a signal. Anything else is returned as it is: lists, pipes, redirections,
 * builtins (`exec echo` would run /bin/echo, which differs), assignments, and programs that are not
 * found (the shell then says so in its own words, exit code 127, as without the prefix).
 */
export function execSimpleCommand(line: string, canExec: (program: string) => boolean): string {
  if (!isSimpleCommand(line)) return line;
  const words = line.trim().split(/[ \t]+/);
  const program = words[0] ?? "";
  if (!plainProgram.test(program) || shellOwnWords.has(program)) return line;
  if (!canExec(program)) return line;
  return `exec ${line.trimStart()}`;
}

/**
 * A word the shell passes on exactly as written: no quoting, escape, expansion, glob, tilde, comment
 * or operator character, so splitting the line at blanks gives what the shell's own reading would.
 */
const plainWord = /^[\w./+@%:,=-]+$/;

/**
 * The words of a line that is one simple command of plain words (see {@link plainWord}) running a
 * program, as `/bin/sh` would split it: such a line means the same run directly, with no shell in
 * between (one exec instead of two). Undefined for anything the shell must read itself: a builtin or
 * reserved word, an assignment (`FOO=1 env`), quotes, `$`, globs, `~`, `#` or any operator.
 */
export function plainCommandWords(line: string): string[] | undefined {
  // Blanks are spaces and tabs only: dash keeps a carriage return or a no-break space in its word.
  const words = line.replace(/^[ \t]+|[ \t]+$/g, "").split(/[ \t]+/);
  const program = words[0] ?? "";
  if (program === "" || program.includes("=") || shellOwnWords.has(program)) return undefined;
  return words.every((word) => plainWord.test(word)) ? words : undefined;
}
