import pty, { type IPty } from "node-pty";

/** Options of {@link TerminalShell.start}. */
export interface TerminalShellOptions {
  /** Columns of the terminal. Default 100. */
  cols?: number;
  /** Rows of the terminal. Default 30. */
  rows?: number;
  /** Environment of the shell (added to this process's). */
  env?: NodeJS.ProcessEnv;
  /** Working directory. */
  cwd?: string;
}

/**
 * TerminalShell is `/bin/sh` in a real pseudo-terminal (node-pty), driven as a person at a keyboard
 * would: type text and keys, read what the terminal shows, resize the window. Everything the
 * terminal printed is kept, so a test waits for text with a bounded poll.
 */
export class TerminalShell {
  private output = "";
  private exited?: { exitCode: number; signal?: number };

  private constructor(private readonly pty: IPty) {
    pty.onData((data) => {
      this.output += data;
    });
    pty.onExit((exit) => {
      this.exited = exit;
    });
  }

  /** Starts `/bin/sh` in a new terminal with the prompt `$ `. */
  static start(options: TerminalShellOptions = {}): TerminalShell {
    const env = { ...process.env, PS1: "$ ", TERM: "xterm-256color", ...options.env } as Record<string, string>;
    for (const key of Object.keys(env)) if (env[key] === undefined) delete env[key];
    return new TerminalShell(
      pty.spawn("/bin/sh", [], {
        name: "xterm-256color",
        cols: options.cols ?? 100,
        rows: options.rows ?? 30,
        cwd: options.cwd,
        env,
      }),
    );
  }

  /** Everything the terminal has shown so far. */
  get screen(): string {
    return this.output;
  }

  /** Types `text` (use `\r` for Enter, `\x03` for Ctrl-C). */
  type(text: string): void {
    this.pty.write(text);
  }

  /** Resizes the terminal, as a person resizing the window: the kernel sends SIGWINCH to its foreground group. */
  resize(cols: number, rows: number): void {
    this.pty.resize(cols, rows);
  }

  /**
   * Waits until the output after `from` (an offset into {@link screen}) matches `pattern`; resolves
   * with the match and the offset after it. Throws with the tail of the screen after `timeoutMs`.
   */
  async waitFor(
    pattern: RegExp,
    { from = 0, timeoutMs = 20_000 }: { from?: number; timeoutMs?: number } = {},
  ): Promise<{ match: RegExpExecArray; end: number }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const tail = this.output.slice(from);
      const match = pattern.exec(tail);
      if (match !== null) return { match, end: from + match.index + match[0].length };
      if (Date.now() > deadline || this.exited !== undefined) {
        throw new Error(
          `the terminal did not show ${pattern} within ${timeoutMs} ms${this.exited ? " (its shell exited)" : ""}; it shows: ${JSON.stringify(tail.slice(-1500))}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  /** Ends the terminal's shell. */
  close(): void {
    if (this.exited === undefined) this.pty.kill("SIGKILL");
  }
}
