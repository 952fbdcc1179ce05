import { InvalidArgumentError, Option, type Command } from "commander";
import { readFileSync } from "node:fs";
import { parseDuration } from "./duration.js";
import { CliError } from "./exit-codes.js";
import type { ResourceLimits } from "../../client/index.js";

/** The flags that say how a command runs, shared by exec and start. */
export interface SpecFlags {
  /** Environment variables (-e), on top of those of --env-file. */
  env: Record<string, string>;
  /** Files of KEY=VALUE lines (--env-file), in order. */
  envFile?: string[];
  /** Working directory (-w). */
  workdir?: string;
  /** Time limit in milliseconds (--timeout); 0 or absent for none. */
  timeout?: number;
  /** Keep stdin open (-i). */
  interactive?: boolean;
  /** Run in a pseudo-terminal (-t). */
  tty?: boolean;
  /** Memory limit of the command's tree, in bytes (--memory). */
  memory?: number;
  /** CPU quota of the command's tree, in CPUs (--cpus). */
  cpus?: number;
  /** Most tasks of the command's tree (--tasks). */
  tasks?: number;
  /** First bytes of each stream the daemon keeps (--head-bytes). */
  headBytes?: number;
  /** Last bytes of the output the daemon keeps (--tail-bytes). */
  tailBytes?: number;
}

/** The command's own limits of `flags`, as the client's `limits` option; undefined for none. */
export function limitsOf(flags: SpecFlags): ResourceLimits | undefined {
  if (flags.memory === undefined && flags.cpus === undefined && flags.tasks === undefined) return undefined;
  return { memoryBytes: flags.memory, cpus: flags.cpus, maxTasks: flags.tasks };
}

const sizeUnits: Readonly<Record<string, number>> = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };

/**
 * Parses a size as `docker run --memory` writes one: a number of bytes with an optional unit b, k,
 * m, g (powers of 1024; `256m`, `1.5G`, `512MiB` too). Throws commander's InvalidArgumentError.
 */
export function parseSize(text: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$/i.exec(text.trim());
  if (match === null) throw new InvalidArgumentError("not a size: write it as 256m, 1.5g or a number of bytes");
  const bytes = Math.floor(Number(match[1]) * sizeUnits[match[2]!.toLowerCase()]!);
  if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new InvalidArgumentError("a size of at least one byte");
  return bytes;
}

/** Parses `--cpus` as `docker run --cpus` does: a positive number of CPUs (0.5, 2). */
export function parseCpus(text: string): number {
  const cpus = Number(text.trim());
  if (text.trim() === "" || !Number.isFinite(cpus) || cpus <= 0)
    throw new InvalidArgumentError("a positive number of CPUs, such as 0.5 or 2");
  return cpus;
}

/** Parses `--tasks`: a whole number of at least 1. */
export function parseTasks(text: string): number {
  const tasks = Number(text.trim());
  if (!Number.isSafeInteger(tasks) || tasks < 1) throw new InvalidArgumentError("a whole number of at least 1");
  return tasks;
}

/** The retention a command's flags ask for: undefined when they name none (the daemon's defaults). */
export function retentionOf(flags: SpecFlags): { headBytes?: number; tailBytes?: number } | undefined {
  if (flags.headBytes === undefined && flags.tailBytes === undefined) return undefined;
  return { headBytes: flags.headBytes, tailBytes: flags.tailBytes };
}

/** The retention a command's flags ask for, as a ProcessSpec field. */
export function retentionSpecOf(flags: SpecFlags): { headBytes?: bigint; tailBytes?: bigint } | undefined {
  const retention = retentionOf(flags);
  if (retention === undefined) return undefined;
  const bytes = (value: number | undefined) => (value === undefined ? undefined : BigInt(value));
  return { headBytes: bytes(retention.headBytes), tailBytes: bytes(retention.tailBytes) };
}

/** Parses a byte count as {@link parseSize} does (64k, 1m), 0 included. */
export function parseByteCount(text: string): number {
  return /^\s*0+\s*$/.test(text) ? 0 : parseSize(text);
}

/**
 * Parses one `-e` value into the variables so far: `KEY=VALUE`, or `KEY` alone to pass this
 * process's own value on (left out when it has none), as `docker exec -e` does.
 */
export function collectEnv(text: string, previous: Record<string, string>): Record<string, string> {
  const equals = text.indexOf("=");
  const key = equals === -1 ? text : text.slice(0, equals);
  if (key === "" || key.includes("\0"))
    throw new InvalidArgumentError("write it as KEY=VALUE (or KEY to pass this shell's value on)");
  if (equals !== -1) return { ...previous, [key]: text.slice(equals + 1) };
  const local = process.env[key];
  return local === undefined ? previous : { ...previous, [key]: local };
}

/**
 * Reads `--env-file` files as `docker run --env-file` does: one `KEY=VALUE` a line (the value as is,
 * quotes included, to the end of the line), `KEY` alone to pass this process's own value on, blank
 * lines and lines starting with `#` skipped. Later files win, and `-e` wins over all of them.
 * Throws a CliError naming the file and line of a bad one.
 */
export function readEnvFiles(files: readonly string[] = []): Record<string, string> {
  let env: Record<string, string> = {};
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch (error) {
      throw new CliError(
        `cannot read the env file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
        { usage: true, cause: error },
      );
    }
    for (const [index, raw] of text.split("\n").entries()) {
      const line = raw.replace(/\r$/, "");
      if (line.trim() === "" || line.trimStart().startsWith("#")) continue;
      try {
        env = collectEnv(line.replace(/^\s*(?:export\s+)?/, ""), env);
      } catch (error) {
        throw new CliError(`${file}:${index + 1}: ${(error as Error).message}`, { usage: true, cause: error });
      }
    }
  }
  return env;
}

/** Adds -i, -t, -e, --env-file, -w, --timeout, --memory, --cpus and --tasks to `command`. */
export function addSpecOptions(command: Command, help: { interactive: string; tty: string }): Command {
  return command
    .option("-i, --interactive", help.interactive)
    .option("-t, --tty", help.tty)
    .addOption(
      new Option(
        "-e, --env <KEY=VALUE>",
        "set an environment variable (repeatable; KEY alone passes this shell's value)",
      )
        .argParser(collectEnv)
        .default({}, "none"),
    )
    .addOption(
      new Option(
        "--env-file <file>",
        "read environment variables from a file of KEY=VALUE lines (repeatable; # comments; -e wins)",
      ).argParser((file: string, previous: string[] | undefined) => [...(previous ?? []), file]),
    )
    .option(
      "-w, --workdir <dir>",
      "working directory, inside the daemon's workspace (default: its first workspace root)",
    )
    .addOption(
      new Option(
        "--timeout <duration>",
        "kill the command (SIGKILL) after this long: 30s, 5m, 1h30m (default: no limit)",
      ).argParser(parseDuration),
    )
    .addOption(
      new Option(
        "--memory <size>",
        "memory limit of the command's whole tree: 256m, 1g (past it the kernel kills it; default: the daemon's)",
      ).argParser(parseSize),
    )
    .addOption(
      new Option(
        "--cpus <n>",
        "CPU limit of the command's whole tree, in CPUs: 0.5, 2 (default: the daemon's)",
      ).argParser(parseCpus),
    )
    .addOption(
      new Option(
        "--tasks <n>",
        "most processes and threads the command may have at once (default: the daemon's)",
      ).argParser(parseTasks),
    )
    .addOption(
      new Option(
        "--head-bytes <n>",
        "first bytes of each stream the daemon keeps for `sandbox logs` (64K, 1M; default: the daemon's, 64 KiB)",
      ).argParser(parseByteCount),
    )
    .addOption(
      new Option(
        "--tail-bytes <n>",
        "last bytes of the output the daemon keeps for `sandbox logs`; what lies between head and tail is dropped (default: the rest of the daemon's --max-output-bytes)",
      ).argParser(parseByteCount),
    );
}

/** The argument that ends these commands' flags: the command to run and its arguments. */
export const commandArgumentHelp =
  "the program and its arguments (no shell); a single argument is a shell command line, as in 'echo $HOME | wc -c'";
