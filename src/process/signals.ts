import { constants } from "node:os";
import { ProcessError } from "./errors.js";

/** A POSIX signal name as Node knows it, such as "SIGTERM". */
export type SignalName = NodeJS.Signals;

const signalNumbers = constants.signals as Record<string, number>;

/**
 * Parses a signal given as "SIGTERM", "TERM", "sigterm" or "15" into its canonical name.
 * An empty string gives `fallback`. Throws a ProcessError (INVALID_ARGUMENT, field `signal`) for anything else.
 */
export function parseSignal(input: string, fallback: SignalName = "SIGTERM"): SignalName {
  const text = input.trim();
  if (text === "") return fallback;
  if (/^\d+$/.test(text)) {
    const number = Number(text);
    const name = Object.keys(signalNumbers).find((key) => signalNumbers[key] === number);
    if (name !== undefined) return name as SignalName;
  } else {
    const upper = text.toUpperCase();
    const name = upper.startsWith("SIG") ? upper : `SIG${upper}`;
    if (name in signalNumbers) return name as SignalName;
  }
  throw new ProcessError(`unknown signal: ${JSON.stringify(input)}`, "INVALID_ARGUMENT", {
    metadata: { field: "signal" },
  });
}

/** Returns the canonical name of a signal number, or `SIG<n>` when Node has no name for it. */
export function signalName(signal: number | string): string {
  if (typeof signal === "string") return signal;
  const name = Object.keys(signalNumbers).find((key) => signalNumbers[key] === signal);
  return name ?? `SIG${signal}`;
}
