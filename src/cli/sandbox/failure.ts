import { CommanderError } from "commander";
import { ProcessNotFoundError, SandboxError, toSandboxError } from "../../client/index.js";
import { escapeControls } from "./escape.js";
import { CliError } from "./exit-codes.js";

/**
 * The one line the CLI prints for a failure (after `sandbox: `): a CliError's message, a
 * SandboxError's message with its code when the message does not say it, commander's usage message
 * without its `error: ` prefix. Newlines are folded, so a failure is always exactly one line, and
 * control characters are escaped ({@link escapeControls}).
 */
export function failureLine(error: unknown): string {
  let text: string;
  if (error instanceof CliError) text = error.message;
  else if (error instanceof CommanderError) text = error.message.replace(/^error: /, "");
  else if (error instanceof ProcessNotFoundError && error.processId !== "")
    text = `no such process: ${error.processId}`;
  else if (error instanceof SandboxError) text = sandboxErrorText(error);
  else if (error instanceof Error && error.name === "ConnectError") text = sandboxErrorText(toSandboxError(error));
  else text = error instanceof Error ? error.message : String(error);
  // One line, and nothing in it (a process id, a daemon's message) may drive the terminal.
  return escapeControls(text.replace(/\s*\n\s*/g, "; ").trim()) || "unknown error";
}

/**
 * A failure of a call about process `id`, for reporting: "no such process: <id>" when the daemon
 * does not know it (whether or not the client could name the process itself), else the failure as
 * a SandboxError. Failures of this CLI's own (a CliError, a broken pipe) pass through.
 */
export function aboutProcess(error: unknown, id: string): unknown {
  if (!(error instanceof SandboxError) && !(error instanceof Error && error.name === "ConnectError")) return error;
  const failure = toSandboxError(error);
  if (failure instanceof ProcessNotFoundError || failure.code === "NOT_FOUND")
    return new CliError(`no such process: ${id}`, { cause: error });
  return failure;
}

/** A SandboxError as text: `<message> (<CODE>)`, or `<message>` when the code adds nothing. */
function sandboxErrorText(error: SandboxError): string {
  const message = error.message || "the daemon gave no reason";
  if (error.code === "UNKNOWN" || error.name !== "SandboxError") return message;
  return `${message} (${error.code})`;
}
