import { Command, InvalidArgumentError, Option } from "commander";
import { OutputLostError, sandboxV1, type OutputOffsets, type Sandbox } from "../../../client/index.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { jsonForTerminal } from "../escape.js";
import { CliError, exitCodes } from "../exit-codes.js";
import { aboutProcess } from "../failure.js";
import { BrokenPipeError, LocalOutput } from "../local-output.js";
import { resolveProcessId } from "../process-ids.js";
import { exitCauseFromProto } from "../../../shared/exit-cause.js";

/** The flags of `sandbox logs`. */
export interface LogsFlags extends ConnectionFlags {
  /** Follow live output until the process exits (-f). */
  follow?: boolean;
  /** Where each stream starts (--from-offset). */
  fromOffset?: OutputOffsets;
  /** Output format (-o): the bytes as they are, or one JSON object. */
  output: "raw" | "json";
}

/** Creates the `logs` command; `finish` receives its exit code. */
export function createLogsCommand(finish: (code: number) => void): Command {
  const command = new Command("logs")
    .summary("print a process's output")
    .description(
      "Print the output the daemon keeps for a process, byte for byte: its stdout on stdout and its stderr on stderr. " +
        "With -f, go on with live output until the process exits (reconnecting if the connection drops). " +
        "--from-offset starts at a byte offset, for example to resume after the bytes already saved: N for stdout " +
        "(stderr from its start; a process with a terminal writes only stdout), N,M for stdout and stderr. " +
        "The daemon keeps the first bytes of each stream and the last; what it dropped between them is marked by a " +
        "line on stderr, where the gap falls: [... 49,800,000 bytes of stdout dropped ...].",
    )
    .option("-f, --follow", "go on printing live output until the process exits")
    .option(
      "--from-offset <offset>",
      "first byte of stdout (N), or of stdout and stderr (N,M); default 0,0",
      parseOffsets,
    )
    .addOption(
      new Option(
        "-o, --output <format>",
        "raw: the bytes on stdout and stderr; json: one object {id, status, exitCode, cause, head, stdout, stderr, stdoutOffset, stderrOffset, dropped} with the text kept (no -f)",
      )
        .choices(["raw", "json"])
        .default("raw"),
    );
  addConnectionOptions(command);
  return command
    .argument("<id>", "the process id, or the start of one")
    .action(async (id: string, flags: LogsFlags) => finish(await runLogs(id, flags)));
}

/**
 * Parses --from-offset: `N` for stdout (stderr from 0), `N,M` for stdout and stderr. One number
 * does not apply to both because the daemon refuses an offset past what a stream has written, and
 * many processes write no stderr at all.
 */
export function parseOffsets(text: string): OutputOffsets {
  const match = /^\s*(\d+)\s*(?:,\s*(\d+)\s*)?$/.exec(text);
  if (match === null) throw new InvalidArgumentError("write it as N (stdout) or N,M (stdout, stderr), in bytes");
  const stdout = Number(match[1]);
  const stderr = match[2] === undefined ? 0 : Number(match[2]);
  if (!Number.isSafeInteger(stdout) || !Number.isSafeInteger(stderr))
    throw new InvalidArgumentError("offset too large");
  return { stdout, stderr };
}

/** Runs `sandbox logs`. */
export async function runLogs(id: string, flags: LogsFlags): Promise<number> {
  if (flags.output === "json" && flags.follow === true)
    throw new CliError("-o json prints what is kept now: drop -f", { usage: true });
  const sandbox = await openSandbox(flags);
  const output = new LocalOutput();
  const from = flags.fromOffset ?? { stdout: 0, stderr: 0 };
  try {
    id = await resolveProcessId(sandbox, id);
    if (flags.output === "json") await printJson(sandbox, id);
    else if (flags.follow === true) await follow(sandbox, id, from, output);
    else await snapshot(sandbox, id, from, output);
    return exitCodes.ok;
  } catch (error) {
    // The reader went away (`| head`): nothing more to say.
    if (error instanceof BrokenPipeError) return exitCodes.ok;
    throw aboutProcess(error, id);
  } finally {
    await closeSandbox(sandbox);
  }
}

/** `-o json`: what the daemon keeps of a process's output now, as text, with where each stream's kept part starts. */
async function printJson(sandbox: Sandbox, id: string): Promise<void> {
  const logs = await sandbox.client.getProcessLogs({ processId: id });
  const text = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
  process.stdout.write(
    jsonForTerminal({
      id: logs.processId,
      status: logs.process === undefined ? null : sandboxV1.ProcessStatus[logs.process.status].toLowerCase(),
      exitCode: logs.process?.exit?.exitCode ?? null,
      cause: (logs.process?.exit && exitCauseFromProto(logs.process.exit.cause)) ?? null,
      stdout: text(logs.stdout),
      stderr: text(logs.stderr),
      stdoutOffset: Number(logs.stdoutOffset),
      stderrOffset: Number(logs.stderrOffset),
      // Each stream's first bytes, when a gap separates them from `stdout`/`stderr` (from their offsets).
      head: {
        stdout: text(logs.head?.stdout ?? new Uint8Array()),
        stderr: text(logs.head?.stderr ?? new Uint8Array()),
      },
      dropped: (logs.head?.dropped ?? []).map((gap) => ({
        stream: gap.stream === sandboxV1.OutputStream.STDERR ? "stderr" : "stdout",
        offset: Number(gap.offset),
        bytes: Number(gap.missedBytes),
      })),
    }),
  );
}

/**
 * What the daemon retains from `from` on, once, in the order it was written. The SDK's text
 * snapshot (`getLogs()`) decodes the bytes, so this reads the raw StreamLogs call without follow.
 */
async function snapshot(sandbox: Sandbox, id: string, from: OutputOffsets, output: LocalOutput): Promise<void> {
  const call = new AbortController();
  try {
    const events = sandbox.client.streamLogs(
      { processId: id, stdoutOffset: BigInt(from.stdout), stderrOffset: BigInt(from.stderr), follow: false },
      { signal: call.signal },
    );
    for await (const response of events) {
      const event = response.event;
      if (event.case === "output")
        await output.write(
          event.value.stream === sandboxV1.OutputStream.STDERR ? "stderr" : "stdout",
          event.value.data,
        );
      else if (event.case === "gap") {
        const stream = event.value.stream === sandboxV1.OutputStream.STDERR ? "stderr" : "stdout";
        reportGap(stream, Number(event.value.offset), Number(event.value.missedBytes));
      } else if (event.case === "exited" || event.case === "caughtUp") return;
    }
  } finally {
    call.abort();
  }
}

/** Everything from `from` on and then live output until the exit, through the SDK's resumable handle. */
async function follow(sandbox: Sandbox, id: string, from: OutputOffsets, output: LocalOutput): Promise<void> {
  let handle = await sandbox.attach(id, from);
  for (;;) {
    try {
      for await (const chunk of handle) await output.write(chunk.stream, chunk.data);
      await handle.result;
      return;
    } catch (error) {
      if (!(error instanceof OutputLostError)) throw error;
      reportGap(error.stream, error.offset, error.missedBytes);
      handle = await handle.reconnect();
    }
  }
}

/**
 * The line on stderr that marks output the daemon dropped, where it falls among the bytes printed
 * (stdout keeps its bytes exact for a pipe or a file).
 */
export function gapMarker(stream: "stdout" | "stderr", offset: number, missedBytes: number): string {
  const count = (n: number) => n.toLocaleString("en-US");
  return `[... ${count(missedBytes)} bytes of ${stream} dropped (offsets ${count(offset)} to ${count(offset + missedBytes)}) ...]\n`;
}

function reportGap(stream: "stdout" | "stderr", offset: number, missedBytes: number): void {
  process.stderr.write(gapMarker(stream, offset, missedBytes));
}
