import { constants } from "node:os";
import { CliError, exitCodes } from "./exit-codes.js";

const signalNumbers = constants.signals as Readonly<Record<string, number | undefined>>;

/** The number of a signal given by name (`SIGTERM`), or undefined when this system knows no such signal. */
export function signalNumber(name: string): number | undefined {
  return signalNumbers[name];
}

/**
 * A signal as the user may write it (`TERM`, `sigterm`, `SIGTERM` or `15`), as the full upper-case
 * name the daemon takes (`SIGTERM`). Throws a usage CliError for a signal this system does not know.
 */
export function parseSignal(text: string): string {
  const trimmed = text.trim();
  if (/^\d+$/.test(trimmed)) {
    const number = Number(trimmed);
    const name = Object.keys(signalNumbers).find((candidate) => signalNumbers[candidate] === number);
    if (name !== undefined) return name;
  } else {
    const upper = trimmed.toUpperCase();
    const name = upper.startsWith("SIG") ? upper : `SIG${upper}`;
    if (signalNumbers[name] !== undefined) return name;
  }
  throw new CliError(`unknown signal: ${text}`, { usage: true });
}

/** The exit code of a process ended by `signal` (a name such as `SIGKILL`): 128 + its number, as a shell reports it. */
export function signalExitCode(signal: string): number | undefined {
  const number = signalNumber(signal);
  return number === undefined ? undefined : exitCodes.signalBase + number;
}

/**
 * Exit code after the reader of this process's output went away: 128 + SIGPIPE, as a shell reports
 * a command that the broken pipe killed.
 */
export const sigpipeExitCode: number = exitCodes.signalBase + (signalNumber("SIGPIPE") ?? 13);

/**
 * Runs `handler` with the signal's name whenever this process receives one of `signals`, instead of
 * Node's default (which ends the process at once); returns the function that puts the default back.
 */
export function onSignals(signals: readonly NodeJS.Signals[], handler: (signal: NodeJS.Signals) => void): () => void {
  for (const signal of signals) process.on(signal, handler);
  return () => {
    for (const signal of signals) process.off(signal, handler);
  };
}
