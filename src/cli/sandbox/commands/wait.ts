import { Command, InvalidArgumentError, Option } from "commander";
import {
  ProcessExitedBeforeReadyError,
  ProcessReadyTimeoutError,
  type Sandbox,
  type WaitForPortOptions,
} from "../../../client/index.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { parseDuration } from "../duration.js";
import { escapeControls, jsonForTerminal } from "../escape.js";
import { CliError, exitCodes } from "../exit-codes.js";
import { aboutProcess } from "../failure.js";
import { resolveProcessId } from "../process-ids.js";

/** The flags every `sandbox wait` command takes. */
interface WaitFlags extends ConnectionFlags {
  /** Time limit in milliseconds (--timeout); none when 0 or absent. */
  timeout?: number;
  /** Output format (-o). */
  output: "text" | "json";
}

/** The flags of `sandbox wait port`. */
export interface WaitPortFlags extends WaitFlags {
  /** The process the wait is tied to (--process). */
  process?: string;
  /** HTTP path to GET (--path): an HTTP check instead of a connection. */
  path?: string;
  /** Accepted HTTP statuses (--status), an HTTP check too. */
  status?: { min: number; max: number };
  /** Host to connect to (--host). */
  host?: string;
}

/** The flags of `sandbox wait log`. */
export interface WaitLogFlags extends WaitFlags {
  /** The stream to search (--stream). */
  stream: "stdout" | "stderr" | "both";
}

/** Creates the `wait` command and its `port`, `log` and `exit` subcommands; `finish` receives the exit code. */
export function createWaitCommand(finish: (code: number) => void): Command {
  const wait = new Command("wait")
    .summary("wait until a port answers, a log line appears or a process exits")
    .description(
      "Wait inside the sandbox, checked by the daemon: until a TCP port accepts connections (or answers HTTP), a " +
        "line of a process's output matches a regular expression, or a process exits. Each exits 0 once its " +
        "condition is met, and 1 when its --timeout passes or the process exits first, saying why on stderr with " +
        "the process's last output lines.",
    );
  const common = (command: Command) =>
    addConnectionOptions(
      command
        .option("--timeout <duration>", "give up after this long (30s, 5m, 1h30m); no limit by default", parseDuration)
        .addOption(new Option("-o, --output <format>", "output format").choices(["text", "json"]).default("text")),
    );
  wait.addCommand(
    common(
      new Command("port")
        .summary("wait until a port accepts connections (or answers HTTP)")
        .description(
          "Wait until a TCP port inside the sandbox accepts a connection (on 127.0.0.1 or ::1, or --host); with " +
            "--path or --status, until an HTTP GET of the path (/ by default) answers with a status in the range " +
            "(200-399 by default). With --process, fail as soon as that process exits. Prints the address that " +
            'answered; -o json prints {"address", "httpStatus", "attempts", "waitedMs"}.',
        )
        .argument("<port>", "the TCP port", parsePort)
        .option("--process <id>", "tie the wait to this process (an id, or the start of one)")
        .option("--path <path>", "check with an HTTP GET of this path")
        .option("--status <range>", "the HTTP statuses accepted: 200, or a range such as 200-299", parseStatus)
        .option("--host <host>", "connect to this host instead of 127.0.0.1 and ::1"),
    ).action(async (port: number, flags: WaitPortFlags) => finish(await runWaitPort(port, flags))),
  );
  wait.addCommand(
    common(
      new Command("log")
        .summary("wait until a line of a process's output matches a pattern")
        .description(
          "Wait until a line of a process's output matches a regular expression (JavaScript syntax, no flags), " +
            "whatever it printed before the wait began included. Prints the line; -o json prints " +
            '{"line", "stream", "offset", "lineOffset"}.',
        )
        .argument("<id>", "the process (an id, or the start of one)")
        .argument("<pattern>", "the regular expression")
        .addOption(
          new Option("--stream <stream>", "the stream to search").choices(["stdout", "stderr", "both"]).default("both"),
        ),
    ).action(async (id: string, pattern: string, flags: WaitLogFlags) => finish(await runWaitLog(id, pattern, flags))),
  );
  wait.addCommand(
    common(
      new Command("exit")
        .summary("wait until a process exits and print its exit code")
        .description(
          "Wait until a process exits and print its exit code (128 + n when signal n ended it), as docker wait " +
            'does; -o json prints {"exitCode", "status", "signal", "cause"}.',
        )
        .argument("<id>", "the process (an id, or the start of one)"),
    ).action(async (id: string, flags: WaitFlags) => finish(await runWaitExit(id, flags))),
  );
  return wait;
}

/** Parses a port for commander. */
function parsePort(text: string): number {
  const port = Number(text);
  if (!/^\d+$/.test(text) || port < 1 || port > 65535) throw new InvalidArgumentError("a port is from 1 to 65535");
  return port;
}

/** Parses `200` or `200-299` for commander. */
function parseStatus(text: string): { min: number; max: number } {
  const match = /^(\d{3})(?:-(\d{3}))?$/.exec(text.trim());
  if (match === null) throw new InvalidArgumentError("write a status (200) or a range (200-299)");
  const min = Number(match[1]);
  return { min, max: match[2] === undefined ? min : Number(match[2]) };
}

/** Runs `sandbox wait port`. */
export async function runWaitPort(port: number, flags: WaitPortFlags): Promise<number> {
  return waiting(flags, async (sandbox) => {
    const processId = flags.process === undefined ? undefined : await resolveProcessId(sandbox, flags.process);
    const http = flags.path !== undefined || flags.status !== undefined;
    const options: WaitForPortOptions & { processId?: string } = {
      mode: http ? "http" : "tcp",
      path: flags.path,
      status: flags.status,
      host: flags.host,
      timeout: flags.timeout,
      processId,
    };
    const ready = await sandbox.waitForPort(port, options);
    return flags.output === "json" ? jsonForTerminal(ready) : `${escapeControls(ready.address)}\n`;
  });
}

/** Runs `sandbox wait log`. */
export async function runWaitLog(typed: string, pattern: string, flags: WaitLogFlags): Promise<number> {
  // The daemon runs the pattern as written: a RegExp carries it there untouched.
  const regexp = checkedPattern(pattern);
  return waiting(flags, async (sandbox) => {
    const handle = await processHandle(sandbox, typed);
    const found = await handle.waitForLog(regexp, {
      timeout: flags.timeout,
      stream: flags.stream,
    });
    if (flags.output === "json") {
      const { line, stream, offset, lineOffset } = found;
      return jsonForTerminal({ line, stream, offset, lineOffset });
    }
    return `${escapeControls(found.line)}\n`;
  });
}

/** Runs `sandbox wait exit`. */
export async function runWaitExit(typed: string, flags: WaitFlags): Promise<number> {
  return waiting(flags, async (sandbox) => {
    const handle = await processHandle(sandbox, typed);
    const exit = await handle.waitForExit({ timeout: flags.timeout });
    if (flags.output === "json")
      return jsonForTerminal({
        exitCode: exit.exitCode,
        status: exit.status,
        signal: exit.signal ?? null,
        cause: exit.cause,
      });
    return `${exit.exitCode}\n`;
  });
}

/** The pattern as a RegExp, so a typo is a usage error here rather than a round trip. */
function checkedPattern(pattern: string): RegExp {
  try {
    return new RegExp(pattern);
  } catch (error) {
    throw new CliError(`not a regular expression: ${(error as Error).message}`, { usage: true });
  }
}

async function processHandle(sandbox: Sandbox, typed: string) {
  const id = await resolveProcessId(sandbox, typed);
  const handle = await sandbox.getProcess(id);
  if (handle === null) throw new CliError(`no such process: ${typed}`);
  return handle;
}

/**
 * Opens the sandbox, runs one wait and prints what it returns. A wait that timed out or whose
 * process exited first is a failure (exit 1) whose one line ends with the process's last output
 * lines, as the daemon reported them.
 */
async function waiting(flags: WaitFlags, wait: (sandbox: Sandbox) => Promise<string>): Promise<number> {
  const sandbox = await openSandbox(flags);
  try {
    process.stdout.write(await wait(sandbox));
    return exitCodes.ok;
  } catch (error) {
    if (error instanceof ProcessReadyTimeoutError || error instanceof ProcessExitedBeforeReadyError) {
      const context = [
        error.lastStdout === "" ? "" : `last stdout: ${error.lastStdout}`,
        error.lastStderr === "" ? "" : `last stderr: ${error.lastStderr}`,
        error instanceof ProcessReadyTimeoutError && error.lastProbe !== "" ? `last try: ${error.lastProbe}` : "",
      ].filter((part) => part !== "");
      throw new CliError([error.message, ...context].join("\n"), { cause: error });
    }
    throw aboutProcess(error, "");
  } finally {
    await closeSandbox(sandbox);
  }
}
