import { Command, InvalidArgumentError, Option } from "commander";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { escapeControls, jsonForTerminal } from "../escape.js";
import { CliError, exitCodes } from "../exit-codes.js";
import { aboutProcess, failureLine } from "../failure.js";
import { resolveProcessId } from "../process-ids.js";
import { parseSignal } from "../signals.js";

/** The flags of `sandbox kill`. */
export interface KillFlags extends ConnectionFlags {
  /** The signal (-s), already parsed to its full name. */
  signal: string;
  /** Every live process of every session (--all). */
  all?: boolean;
  /** Output format (-o). */
  output: "text" | "json";
}

/** Creates the `kill` command; `finish` receives its exit code. */
export function createKillCommand(finish: (code: number) => void): Command {
  const command = new Command("kill")
    .summary("send a signal to processes")
    .description(
      "Send a signal to the whole process group of each process (an id, or the start of one), or of every live " +
        "process with --all. With SIGTERM (the default) the daemon follows up with SIGKILL if the process is still " +
        'alive 5 seconds later. -o json prints what was signalled: {"signalled": [ids], "signal": name}.',
    )
    .option(
      "-s, --signal <signal>",
      "the signal: a name (TERM, SIGINT, KILL) or a number",
      parseSignalOption,
      "SIGTERM",
    )
    .option("--all", "every live process of every session")
    .addOption(new Option("-o, --output <format>", "output format").choices(["text", "json"]).default("text"));
  addConnectionOptions(command);
  return command
    .argument("[id...]", "ids of the processes, or the start of each")
    .action(async (ids: string[], flags: KillFlags) => finish(await runKill(ids, flags)));
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
  if (flags.all === true && ids.length > 0) throw new CliError("give ids or --all, not both", { usage: true });
  if (flags.all !== true && ids.length === 0)
    throw new CliError("missing process ids (or --all for every live process)", { usage: true });
  const sandbox = await openSandbox(flags);
  let code: number = exitCodes.ok;
  const signalled: string[] = [];
  try {
    if (flags.all === true) {
      const live = await sandbox.listProcesses({ all: true, statuses: ["starting", "running"] });
      ids = live.map((handle) => handle.id);
    }
    for (const typed of ids) {
      try {
        const id = flags.all === true ? typed : await resolveProcessId(sandbox, typed);
        await sandbox.killProcess(id, flags.signal);
        signalled.push(id);
      } catch (error) {
        // Under --all a process may exit between the list and its signal: that is not a failure.
        if (flags.all === true) continue;
        process.stderr.write(`sandbox: ${failureLine(aboutProcess(error, typed))}\n`);
        code = exitCodes.failure;
      }
    }
    if (flags.output === "json") process.stdout.write(jsonForTerminal({ signalled, signal: flags.signal }));
    else if (flags.all === true)
      process.stdout.write(
        `${signalled.length} ${signalled.length === 1 ? "process" : "processes"} signalled (${escapeControls(flags.signal)})\n`,
      );
    return code;
  } finally {
    await closeSandbox(sandbox);
  }
}
