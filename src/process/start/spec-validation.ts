import type { ProcessSpec } from "./command.js";
import { ProcessError } from "../errors.js";
import {
  maxArgumentBytes,
  maxArgumentCount,
  maxCommandLineBytes,
  maxEnvironmentCount,
  maxIdLength,
  maxPathBytes,
  maxTermLength,
  ptySizeProblem,
  stdinDataProblem,
  timeoutProblem,
} from "../../shared/limits.js";

/** Refuses a spec outside the bounds of limits.ts with a ProcessError (INVALID_ARGUMENT, naming the field). */
export function validateSpec(spec: ProcessSpec): void {
  const invalid = (field: string, message: string) =>
    new ProcessError(message, "INVALID_ARGUMENT", { metadata: { field } });
  if (spec.command.trim() === "") throw invalid("command", "command is empty");
  if (spec.command.includes("\0")) throw invalid("command", "command contains a NUL byte");
  const args = spec.args ?? [];
  if (args.some((arg) => arg.includes("\0"))) throw invalid("args", "an argument contains a NUL byte");
  if (args.length > maxArgumentCount)
    throw invalid("args", `too many arguments: at most ${maxArgumentCount}, got ${args.length}`);
  const env = Object.entries(spec.env ?? {});
  if (env.length > maxEnvironmentCount)
    throw invalid("env", `too many environment variables: at most ${maxEnvironmentCount}, got ${env.length}`);
  let total = 0;
  const count = (field: string, what: string, text: string) => {
    const bytes = Buffer.byteLength(text, "utf8");
    if (bytes > maxArgumentBytes) throw invalid(field, `${what} is longer than ${maxArgumentBytes} bytes`);
    total += bytes + 1;
  };
  count("command", "command", spec.command);
  for (const arg of args) count("args", "an argument", arg);
  for (const [key, value] of env) {
    if (key === "" || key.includes("=") || key.includes("\0"))
      throw invalid("env", `invalid environment variable name: ${JSON.stringify(key.slice(0, 64))}`);
    if (value.includes("\0")) throw invalid("env", `environment variable ${key} contains a NUL byte`);
    count("env", `environment variable ${key.slice(0, 64)}`, `${key}=${value}`);
  }
  if (total > maxCommandLineBytes)
    throw invalid(
      "command",
      `command, arguments and environment together are longer than ${maxCommandLineBytes} bytes`,
    );
  if (Buffer.byteLength(spec.cwd ?? "", "utf8") > maxPathBytes)
    throw invalid("cwd", `working directory is longer than ${maxPathBytes} bytes`);
  if ((spec.cwd ?? "").includes("\0")) throw invalid("cwd", "working directory contains a NUL byte");
  const timeout = timeoutProblem(spec.timeoutMs ?? 0);
  if (timeout !== undefined) throw invalid("timeout_ms", timeout);
  const id = spec.processId ?? "";
  if (id.length > maxIdLength) throw invalid("process_id", `process id is longer than ${maxIdLength} characters`);
  if (/[\0-\x1f\x7f/]/.test(id)) throw invalid("process_id", "process id contains a control character or a slash");
  validateSessionId(spec.sessionId);
  if (spec.pty) {
    const size = ptySizeProblem(spec.pty.cols ?? 0, spec.pty.rows ?? 0, "start");
    if (size !== undefined) throw invalid("pty", size);
    const term = spec.pty.term ?? "";
    if (term.length > maxTermLength) throw invalid("pty", `pty term is longer than ${maxTermLength} characters`);
    if (/[\0-\x20\x7f]/.test(term)) throw invalid("pty", "pty term contains a control character or a space");
  }
  const stdinData = stdinDataProblem(spec.stdinData?.length ?? 0);
  if (stdinData !== undefined) throw invalid("stdin_data", stdinData);
}

/** Refuses a session id over {@link maxIdLength} characters or with control characters. */
export function validateSessionId(sessionId: string | undefined): void {
  if (sessionId === undefined) return;
  const invalid = (message: string) =>
    new ProcessError(message, "INVALID_ARGUMENT", { metadata: { field: "session_id" } });
  if (sessionId.length > maxIdLength) throw invalid(`session id is longer than ${maxIdLength} characters`);
  if (/[\0-\x1f\x7f]/.test(sessionId)) throw invalid("session id contains a control character");
}
