import {
  type CommandFinished,
  checkOptions,
  commandOptionNames,
  type CommandOptions,
  launch,
  type LaunchContext,
} from "../core/index.js";
import { CommandHandle } from "./command-handle.js";

/**
 * Options of `run()`, as the LangSmith sandbox SDK's `run(command, { timeout, wait })`: the
 * command's options with its time limit named `timeout`, in seconds as there.
 */
export interface RunOptions extends Omit<CommandOptions, "timeoutMs"> {
  /** Time limit in seconds: the daemon SIGKILLs the process group on expiry (exit code 137). */
  timeout?: number;
  /** Wait for the exit and resolve with a CommandFinished (default true); false resolves with a live CommandHandle. */
  wait?: boolean;
}

const { timeoutMs: _timeoutMs, ...rest } = commandOptionNames;
const runOptionNames = { ...rest, timeout: true, wait: true } as const;

/**
 * Runs a command as the LangSmith sandbox SDK's `run()`: with `wait: false` resolves at once with
 * a live, resumable {@link CommandHandle} of a background command (its `kill()` sends SIGKILL);
 * otherwise waits through Exec and resolves with the {@link CommandFinished}, whatever the exit
 * code. A waiting run defaults to the sandbox's time limit, a background one to none.
 */
export async function run(
  context: LaunchContext,
  command: string,
  options: RunOptions = {},
): Promise<CommandHandle | CommandFinished> {
  checkOptions(options, runOptionNames, "run");
  const { timeout, wait, ...commandOptions } = options;
  const core = { ...commandOptions, timeoutMs: timeout === undefined ? undefined : timeout * 1000 };
  if (wait === false) return launch(context, command, core, "background", CommandHandle);
  return (await launch(context, command, core, "wait")).result;
}
