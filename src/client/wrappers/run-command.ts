import {
  type CommandFinished,
  checkOptions,
  commandOptionNames,
  type CommandOptions,
  SandboxError,
  launch,
  type LaunchContext,
  type ProcessHandle,
} from "../core/index.js";

/**
 * Options of `runCommand()`, as Vercel Sandbox's `runCommand(cmd, args, opts)`: the command's
 * options (`timeoutMs` SIGKILLs on expiry, `signal` cancels, `sudo` runs as root), plus `detached`.
 */
export interface RunCommandOptions extends Omit<CommandOptions, "args"> {
  /** Resolve at once with a live {@link Command} instead of waiting for the exit. */
  detached?: boolean;
}

/** The object form of `runCommand()`, as Vercel Sandbox's: `{ cmd, args, ...options }`. */
export interface RunCommandParams extends RunCommandOptions {
  /** The program (or a shell command line when there are no args). */
  cmd: string;
  /** Its arguments (argv form, no shell). */
  args?: readonly string[];
}

/**
 * A live command, as Vercel Sandbox's `Command`: `wait()` resolves with its CommandFinished,
 * `logs()` yields `{ stream, data }` text, `kill(signal?)` sends SIGTERM by default. It is a
 * {@link ProcessHandle}, so everything else a handle does works too.
 */
export type Command = ProcessHandle;

const { args: _args, ...optionNames } = commandOptionNames;
const runCommandOptionNames = { ...optionNames, detached: true } as const;
const runCommandParamNames = { ...runCommandOptionNames, cmd: true, args: true } as const;

/**
 * Runs a command as Vercel Sandbox's `runCommand()`, positional (`cmd, args?, options?`) or as one
 * object (`{ cmd, args, ...options }`): blocking waits through Exec and resolves with the
 * {@link CommandFinished} whatever the exit code (a `timeoutMs` expiry is exit code 137), rejecting
 * with `signal`'s reason when aborted; `detached: true` resolves at once with a live
 * {@link Command}, which `signal` kills. Arguments of another shape are a SandboxError INVALID_ARGUMENT.
 */
export async function runCommand(
  context: LaunchContext,
  first: string | RunCommandParams,
  args?: readonly string[],
  options?: RunCommandOptions,
): Promise<Command | CommandFinished> {
  let params: RunCommandParams;
  if (typeof first === "string") {
    if (args !== undefined && !Array.isArray(args))
      throw new SandboxError("runCommand(cmd, args, options): args must be an array of strings", "INVALID_ARGUMENT");
    checkOptions(options, runCommandOptionNames, "runCommand(cmd, args, options)");
    params = { ...options, cmd: first, args };
  } else {
    if (args !== undefined || options !== undefined)
      throw new SandboxError("runCommand({ cmd, ... }) takes one argument", "INVALID_ARGUMENT");
    checkOptions(first, runCommandParamNames, "runCommand({ cmd, ... })");
    params = first;
  }
  const { cmd, detached, ...commandOptions } = params;
  if (detached === true) return launch(context, cmd, commandOptions, "background");
  return (await launch(context, cmd, commandOptions, "wait")).result;
}
