import { Command, InvalidArgumentError } from "commander";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { exitCodes } from "../exit-codes.js";
import { aboutProcess, failureLine } from "../failure.js";
import { parseSignal } from "../signals.js";

/** The flags of `sandbox kill`. */
export interface KillFlags extends ConnectionFlags {
  /** The signal (-s), already parsed to its full name. */
  signal: string;
}

/** Creates the `kill` command; `finish` receives its exit code. */
export function createKillCommand(finish: (code: number) => void): Command {
  const command = new Command("kill")
    .summary("send a signal to processes")
    .description(
      "Send a signal to the whole process group of each process. With SIGTERM (the default) the daemon follows up " +
        "with SIGKILL if the process is still alive 5 seconds later.",
    )
    .option("-s, --signal <signal>", "the signal: a name (TERM, SIGINT, KILL) or a number", parseSignalOption, "SIGTERM");
  addConnectionOptions(command);
  return command.argument("<id...>", "ids of the processes").action(async (ids: string[], flags: KillFlags) => finish(await runKill(ids, flags)));
}

/** Parses -s for commander: a usage error names the option. */
function parseSignalOption(text: string): string {
  try {
    return parseSignal(text);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

/** Runs `sandbox kill`; a process that cannot be signalled is one line on stderr, and the exit code is then 1. */
export async function runKill(ids: string[], flags: KillFlags): Promise<number> {
  const sandbox = await openSandbox(flags);
  let code: number = exitCodes.ok;
  try {
    for (const id of ids) {
      try {
        await sandbox.killProcess(id, flags.signal);
      } catch (error) {
        process.stderr.write(`sandbox: ${failureLine(aboutProcess(error, id))}\n`);
        code = exitCodes.failure;
      }
    }
    return code;
  } finally {
    await closeSandbox(sandbox);
  }
}
