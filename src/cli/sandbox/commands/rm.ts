import { Command, Option } from "commander";
import { ProcessNotFoundError, SandboxError } from "../../../client/index.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { jsonForTerminal } from "../escape.js";
import { CliError, exitCodes } from "../exit-codes.js";
import { aboutProcess, failureLine } from "../failure.js";
import { resolveProcessId } from "../process-ids.js";

/** The flags of `sandbox rm`. */
export interface RmFlags extends ConnectionFlags {
  /** Every exited record of every session (--all). */
  all?: boolean;
  /** Output format (-o). */
  output: "text" | "json";
}

/** Creates the `rm` command; `finish` receives its exit code. */
export function createRmCommand(finish: (code: number) => void): Command {
  const command = new Command("rm")
    .summary("remove the records of exited processes")
    .description(
      "Remove the records (and the kept output) of exited processes now, instead of when the daemon lets them go: " +
        "each given id (or the start of one), or every exited record with --all. A live process is refused: stop it " +
        'first with `sandbox kill`. -o json prints {"removed": [ids]} ({"removed": n} with --all).',
    )
    .option("--all", "every exited record of every session")
    .addOption(new Option("-o, --output <format>", "output format").choices(["text", "json"]).default("text"));
  addConnectionOptions(command);
  return command
    .argument("[id...]", "ids of exited processes, or the start of each")
    .action(async (ids: string[], flags: RmFlags) => finish(await runRm(ids, flags)));
}

/** Runs `sandbox rm`: a record that cannot be removed is one line on stderr, and the exit code is then 1. */
export async function runRm(ids: string[], flags: RmFlags): Promise<number> {
  if (flags.all === true && ids.length > 0) throw new CliError("give ids or --all, not both", { usage: true });
  if (flags.all !== true && ids.length === 0)
    throw new CliError("missing process ids (or --all for every exited record)", { usage: true });
  const sandbox = await openSandbox(flags);
  try {
    if (flags.all === true) {
      const { removedCount } = await sandbox.client.cleanupProcesses({});
      process.stdout.write(
        flags.output === "json"
          ? jsonForTerminal({ removed: removedCount })
          : `${removedCount} exited ${removedCount === 1 ? "record" : "records"} removed\n`,
      );
      return exitCodes.ok;
    }
    let code: number = exitCodes.ok;
    const removed: string[] = [];
    for (const typed of ids) {
      try {
        const id = await resolveProcessId(sandbox, typed);
        const handle = await sandbox.getProcess(id);
        if (handle === null) throw new ProcessNotFoundError(id);
        if (handle.exit === undefined)
          throw new CliError(`process ${id} is still running: stop it first (sandbox kill ${id})`);
        const { removedCount } = await sandbox.client.cleanupProcesses({ processIds: [id] });
        if (removedCount !== 1) throw new SandboxError("the record was already gone", "NOT_FOUND");
        removed.push(id);
      } catch (error) {
        process.stderr.write(`sandbox: ${failureLine(aboutProcess(error, typed))}\n`);
        code = exitCodes.failure;
      }
    }
    if (flags.output === "json") process.stdout.write(jsonForTerminal({ removed }));
    return code;
  } finally {
    await closeSandbox(sandbox);
  }
}
