import { Command, Option } from "commander";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { CliError, exitCodes } from "../exit-codes.js";
import { escapeControls, jsonForTerminal } from "../escape.js";
import {
  addSpecOptions,
  commandArgumentHelp,
  limitsOf,
  readEnvFiles,
  retentionOf,
  type SpecFlags,
} from "../spec-options.js";
import { terminalSize } from "../terminal.js";

/** The flags of `sandbox start`. */
export interface StartFlags extends SpecFlags, ConnectionFlags {
  /** Client-chosen process id (--id). */
  id?: string;
  /** Session of the process (--session). */
  session?: string;
  /** Output format (-o). */
  output: "text" | "json";
}

/** Creates the `start` command; `finish` receives its exit code. */
export function createStartCommand(finish: (code: number) => void): Command {
  const command = new Command("start")
    .summary("start a background process and print its id")
    .description(
      "Start a command in the background and print its process id, for `sandbox logs`, `attach`, `kill` and `ps`. " +
        "The process outlives this command; the daemon keeps its output (the first bytes of each stream and the last, " +
        "up to its --max-output-bytes; --head-bytes and --tail-bytes choose) and its record until a while after it exits.",
    )
    .usage("[options] [--] <command> [args...]");
  addSpecOptions(command, {
    interactive: "keep the process's stdin open, to feed it later with `sandbox attach -i`",
    tty: "run the process in a pseudo-terminal (of this terminal's size, else 80x24)",
  });
  command
    .option("--id <id>", "the process id to use instead of a random UUID; refused while a live process has it")
    .option("--session <id>", "the session the process belongs to (see `sandbox ps --session`)")
    .addOption(
      new Option("-o, --output <format>", "output format: the id alone, or JSON ({id, pid, status, sessionId})")
        .choices(["text", "json"])
        .default("text"),
    );
  addConnectionOptions(command);
  return command
    .argument("<command...>", commandArgumentHelp)
    .passThroughOptions()
    .action(async (argv: string[], flags: StartFlags) => finish(await runStart(argv, flags)));
}

/** Runs `sandbox start`: prints the new process's id on stdout. */
export async function runStart(argv: string[], flags: StartFlags): Promise<number> {
  const env = { ...readEnvFiles(flags.envFile), ...flags.env };
  const sandbox = await openSandbox(flags, { sessionId: flags.session });
  try {
    const size = flags.tty === true ? terminalSize() : undefined;
    const handle = await sandbox.startProcess(argv[0], {
      args: argv.slice(1),
      env,
      cwd: flags.workdir,
      timeout: flags.timeout ?? 0,
      processId: flags.id,
      stdin: flags.interactive === true ? true : undefined,
      pty: flags.tty === true ? { ...size, term: process.env.TERM } : undefined,
      limits: limitsOf(flags),
      retention: retentionOf(flags),
    });
    // A program that could not be started has a record in status `error` rather than a refused call.
    if (handle.status === "error")
      throw new CliError(handle.exit?.error ?? `the command could not be started (process ${handle.id})`);
    if (flags.output === "json")
      process.stdout.write(
        jsonForTerminal({
          id: handle.id,
          pid: handle.pid ?? null,
          status: handle.status,
          sessionId: handle.sessionId ?? null,
        }),
      );
    else process.stdout.write(`${escapeControls(handle.id)}\n`);
    return exitCodes.ok;
  } finally {
    await closeSandbox(sandbox);
  }
}
