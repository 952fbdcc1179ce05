import { Command, CommanderError } from "commander";
import { sandboxdVersion } from "../../shared/version.js";
import { createAttachCommand } from "./commands/attach.js";
import { createCpCommand } from "./commands/cp.js";
import { createExecCommand } from "./commands/exec.js";
import { createKillCommand } from "./commands/kill.js";
import { createLogsCommand } from "./commands/logs.js";
import { createCompletionCommand } from "./commands/completion.js";
import { createLsCommand } from "./commands/ls.js";
import { createPortsCommand } from "./commands/ports.js";
import { createPsCommand } from "./commands/ps.js";
import { createRmCommand } from "./commands/rm.js";
import { createStartCommand } from "./commands/start.js";
import { createWaitCommand } from "./commands/wait.js";
import { addConnectionOptions, connectionOptionKeys, defaultUrl } from "./connection.js";
import { CliError, exitCodes, failureExitCode } from "./exit-codes.js";
import { failureLine } from "./failure.js";

/** A command-line error of one command, remembering which, for its exit code. */
class UsageError extends CliError {
  constructor(
    readonly commanderError: CommanderError,
    readonly command: string | undefined,
  ) {
    super(failureLine(commanderError), { usage: true, cause: commanderError });
  }
}

/** Builds the `sandbox` program; `finish` receives the exit code of the command that ran. */
export function createProgram(finish: (code: number) => void): Command {
  const program = new Command("sandbox")
    .description(
      "Run commands in a sandboxd daemon from a terminal, and copy and list its files.\n\n" +
        `The daemon is at --url or $SANDBOXD_URL (default ${defaultUrl}); its token is read from --token-file or $SANDBOXD_TOKEN ` +
        "(the variables the TypeScript and Python clients read too; the old SANDBOX_URL and SANDBOX_TOKEN still work, with a warning).\n\n" +
        "Exit codes: exec and attach exit with the command's own code (128 + n when signal n ended it) and with 125 " +
        "when sandbox itself fails (126: the command could not be run, 127: not found); the other commands exit 1 " +
        "when they fail and 2 on bad usage.",
    )
    .version(sandboxdVersion, "-V, --version", "print the version and exit")
    .helpOption("-h, --help", "show help for the command")
    .enablePositionalOptions();
  addConnectionOptions(program);
  // Connection flags given before the command's name apply unless the command has its own.
  program.hook("preAction", (_, command) => {
    for (const key of connectionOptionKeys) {
      if (command.getOptionValue(key) === undefined && program.getOptionValue(key) !== undefined)
        command.setOptionValue(key, program.getOptionValue(key));
    }
  });
  for (const create of [
    createExecCommand,
    createStartCommand,
    createPsCommand,
    createLogsCommand,
    createKillCommand,
    createRmCommand,
    createAttachCommand,
    createCpCommand,
    createLsCommand,
    createWaitCommand,
    createPortsCommand,
  ]) {
    program.addCommand(create(finish));
  }
  program.addCommand(createCompletionCommand(finish, () => program));
  // Every command, subcommands of subcommands (`wait port`) included, named by its path from the program.
  const everyCommand = (command: Command): Command[] => [command, ...command.commands.flatMap(everyCommand)];
  const pathOf = (command: Command): string =>
    command.parent === null || command.parent === program
      ? command.name()
      : `${pathOf(command.parent)} ${command.name()}`;
  for (const command of everyCommand(program)) {
    const name = command === program ? undefined : pathOf(command);
    command
      .helpOption("-h, --help", "show this help")
      .configureOutput({ outputError: () => {} })
      .exitOverride((error) => {
        // Help and version were printed: a success. Everything else is a usage error, reported by the caller.
        if (error.exitCode === 0 && error.code !== "commander.help") throw error;
        throw new UsageError(error, name);
      });
  }
  return program;
}

/**
 * Runs the `sandbox` command line (`argv` without node and the script) and resolves with the exit
 * code; a failure was printed as one `sandbox: ...` line on stderr.
 */
export async function runSandbox(argv: readonly string[]): Promise<number> {
  let exitCode: number = exitCodes.ok;
  let running: string | undefined;
  const program = createProgram((code) => (exitCode = code));
  program.hook("preAction", (_, command) => {
    running = command.name();
  });
  try {
    await program.parseAsync([...argv], { from: "user" });
    return exitCode;
  } catch (error) {
    if (error instanceof CommanderError && error.exitCode === 0) return exitCodes.ok;
    if (error instanceof UsageError && error.commanderError.code === "commander.help") {
      // `sandbox` alone: commander printed the help on stderr.
      return failureExitCode(error.command, true);
    }
    process.stderr.write(`sandbox: ${failureLine(error)}${usageHint(error)}\n`);
    if (error instanceof UsageError) return failureExitCode(error.command, true);
    return failureExitCode(running, error instanceof CliError && error.usage);
  }
}

/** Where to read more after a usage error. */
function usageHint(error: unknown): string {
  if (!(error instanceof UsageError)) return "";
  return ` (see 'sandbox${error.command === undefined ? "" : ` ${error.command}`} --help')`;
}
