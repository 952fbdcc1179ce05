import { SandboxError, type Sandbox } from "../../client/index.js";
import { CliError } from "./exit-codes.js";

/**
 * Resolves what the user typed to one process id, as `docker` does with container ids: the id
 * itself when the daemon knows it, else the one id (live or exited, of any session) that starts
 * with it. No match is "no such process", several are a CliError listing them. Ids are UUIDs by
 * default: `396b` is enough while no other id starts the same way.
 */
export async function resolveProcessId(sandbox: Sandbox, typed: string): Promise<string> {
  if (typed === "") throw new CliError("an empty process id", { usage: true });
  if ((await sandbox.getProcess(typed)) !== null) return typed;
  const matches = (await sandbox.listProcesses({ all: true }))
    .map((handle) => handle.id)
    .filter((id) => id.startsWith(typed));
  if (matches.length === 1) return matches[0];
  // The messages are printed through failureLine, which escapes control characters.
  if (matches.length === 0)
    throw new CliError(`no such process: ${typed}`, { cause: new SandboxError("not found", "NOT_FOUND") });
  const shown = matches.slice(0, 5).join(", ");
  throw new CliError(
    `the id prefix ${typed} is ambiguous: it starts ${matches.length} ids (${shown}${matches.length > 5 ? ", ..." : ""}); type more of it`,
  );
}
