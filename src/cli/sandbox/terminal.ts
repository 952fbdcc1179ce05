import { spawnSync } from "node:child_process";
import type { ReadStream, WriteStream } from "node:tty";

/** Size of a terminal in character cells. */
export interface TerminalSize {
  /** Columns. */
  cols: number;
  /** Rows. */
  rows: number;
}

/** The terminal this process writes to: stdout, else stderr, when either is one. */
function outputTerminal(): WriteStream | undefined {
  if (process.stdout.isTTY) return process.stdout;
  if (process.stderr.isTTY) return process.stderr;
  return undefined;
}

/** Size of this process's terminal (that of stdout, else of stderr); undefined when neither is a terminal. */
export function terminalSize(): TerminalSize | undefined {
  const terminal = outputTerminal();
  if (terminal === undefined) return undefined;
  const [cols, rows] = terminal.getWindowSize();
  return cols > 0 && rows > 0 ? { cols, rows } : undefined;
}

/**
 * Calls `listener` with the new size each time this process's terminal is resized (Node reads the
 * size again on SIGWINCH and emits `resize`). Returns the function that stops listening.
 */
export function onTerminalResize(listener: (size: TerminalSize) => void): () => void {
  const terminal = outputTerminal();
  if (terminal === undefined) return () => {};
  const resized = () => {
    const size = terminalSize();
    if (size !== undefined) listener(size);
  };
  terminal.on("resize", resized);
  return () => terminal.off("resize", resized);
}

/**
 * RawMode is a local terminal switched to raw mode, as `docker exec -it` and `kubectl exec -it` switch
 * theirs (Go's term.MakeRaw, cfmakeraw): no echo, no line editing, keys such as Ctrl-C and Ctrl-Z
 * arrive as bytes for the remote terminal instead of signalling this process, and neither input nor
 * output is translated. Node's setRawMode leaves output processing on (a lone `\n` would become
 * `\r\n`), so `stty -opost` turns it off, where stty exists.
 *
 * `restore()` puts back the terminal's settings from before (libuv saved them when raw mode began).
 * It also runs when this process exits by any path Node sees, an uncaught error included; Node itself
 * resets its terminals when killed by SIGTERM or SIGINT. Only SIGKILL leaves the terminal raw.
 */
export class RawMode {
  private state: { kind: "raw" } | { kind: "restored" } = { kind: "raw" };
  private readonly restoreAtExit = () => this.restore();

  private constructor(private readonly input: ReadStream & { fd: number }) {
    input.setRawMode(true);
    spawnSync("stty", ["-opost"], { stdio: [input.fd, "ignore", "ignore"] });
    process.once("exit", this.restoreAtExit);
  }

  /** Switches `input`, a terminal, to raw mode. */
  static enter(input: ReadStream & { fd: number }): RawMode {
    return new RawMode(input);
  }

  /** Whether the terminal is still in raw mode. */
  get active(): boolean {
    return this.state.kind === "raw";
  }

  /** Puts the terminal's settings back as they were; doing it twice does nothing. Synchronous, so it also works at exit. */
  restore(): void {
    if (this.state.kind === "restored") return;
    this.state = { kind: "restored" };
    process.off("exit", this.restoreAtExit);
    this.input.setRawMode(false);
  }
}
