/**
 * Exit codes of the `sandbox` command-line client.
 *
 * `exec` and `attach` relay a command running in the sandbox: they exit with its exit code (128 + n
 * when signal n ended it), so their own failures (bad usage, no daemon, a refused token, a lost
 * connection) use 125, as `docker exec` and `docker run` do; 126 and 127 mean the command could not
 * be run or was not found, as a shell says. Every other command exits 0 on success, 1 when it
 * failed and 2 on bad usage, as most command-line tools do.
 */
export const exitCodes = {
  /** Success. */
  ok: 0,
  /** A command other than exec or attach failed (the daemon refused it, could not be reached, ...). */
  failure: 1,
  /** A command other than exec or attach was used wrongly (unknown flag, missing argument). */
  usage: 2,
  /** exec or attach failed, or was used wrongly, before or instead of relaying the command's own code. */
  relayFailure: 125,
  /** The command could not be run (permission denied), as a shell reports it. */
  cannotRun: 126,
  /** The command was not found, as a shell reports it. */
  notFound: 127,
  /** Base of the exit code of a process ended by a signal: 128 + the signal's number. */
  signalBase: 128,
} as const;

/** Names of the commands whose exit code is that of the command they relay. */
export const relayingCommands: ReadonlySet<string> = new Set(["exec", "attach"]);

/**
 * CliError is a failure the CLI reports as one line on stderr (`sandbox: <message>`), with a
 * non-zero exit code chosen by {@link failureExitCode}.
 */
export class CliError extends Error {
  /** Whether the command line itself was wrong (exit 2, or 125 for exec and attach). */
  readonly usage: boolean;

  constructor(message: string, options: { usage?: boolean; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = "CliError";
    this.usage = options.usage ?? false;
  }
}

/** The exit code of a failure of `command` (its name; undefined before one was chosen). */
export function failureExitCode(command: string | undefined, usage: boolean): number {
  if (command !== undefined && relayingCommands.has(command)) return exitCodes.relayFailure;
  return usage ? exitCodes.usage : exitCodes.failure;
}
