import { createRequire } from "node:module";

/**
 * How pino-pretty writes for a person: synchronously, one line per record, the time of day only,
 * without the fields every line has, so a terminal shows what happened at a glance (the full record
 * is the JSON format's). The one-file build's copy of {@link createPrettyStream} uses it too.
 */
export const prettyLines = {
  sync: true,
  singleLine: true,
  translateTime: "SYS:HH:MM:ss.l",
  ignore: "pid,hostname,service",
} as const;

/** Options for {@link createPrettyStream}. */
export interface PrettyStreamOptions {
  /** Where the lines go. */
  destination: NodeJS.WritableStream;
  /** Colours, for a terminal. */
  colorize: boolean;
}

/**
 * Creates pino-pretty's stream: human-readable log lines for a person at a terminal, written
 * synchronously in this thread. pino-pretty is loaded on the first call only, so a daemon logging
 * JSON never loads it; the one-file build swaps this module for a static import (it has no
 * node_modules to load from).
 */
export function createPrettyStream(options: PrettyStreamOptions): NodeJS.WritableStream {
  const pinoPretty = createRequire(import.meta.url)("pino-pretty") as (options: object) => NodeJS.WritableStream;
  return pinoPretty({ ...options, ...prettyLines });
}
