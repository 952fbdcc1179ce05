import { Command, Option } from "commander";
import type { CommandHandle, ExitCause, ProcessStatus, ResourceUsage } from "../../../client/index.js";
import { describeExitCause } from "../../../shared/exit-cause.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { escapeControls, jsonForTerminal } from "../escape.js";
import { exitCodes } from "../exit-codes.js";

/** The flags of `sandbox ps`. */
export interface PsFlags extends ConnectionFlags {
  /** Every process the daemon keeps, exited ones too (-a). */
  all?: boolean;
  /** Only the ids, one a line (-q). */
  quiet?: boolean;
  /** Only this session's processes (--session). */
  session?: string;
  /** Output format (-o). */
  output: "table" | "json";
}

/** Statuses of a process still alive. */
const liveStatuses: readonly ProcessStatus[] = ["starting", "running"];

/** Creates the `ps` command; `finish` receives its exit code. */
export function createPsCommand(finish: (code: number) => void): Command {
  const command = new Command("ps")
    .summary("list processes")
    .description(
      "List the daemon's live processes of every session, oldest first, as a table, as ids (-q: one a line, for " +
        "`sandbox kill $(sandbox ps -q)`) or as JSON (-o json: an array of objects with id, pid, status, exitCode, " +
        "signal, cause (why it ended: exited, signaled, killed_on_request, timed_out, out_of_memory, daemon_shutdown, " +
        "start_failed, unknown), sessionId, startTime, endTime, command, args and usage: what an exited process used, as the daemon read " +
        "it from its cgroups). With -a, all: every process the daemon keeps, " +
        "exited ones included (as `all` means in the TypeScript and Python clients). Control characters in command " +
        "lines are shown escaped (\\e, \\n, \\xNN).",
    )
    .option("-a, --all", "all: every process the daemon keeps, exited ones included")
    .option("-q, --quiet", "print only the ids, one a line")
    .option("--session <id>", "only the processes of this session")
    .addOption(new Option("-o, --output <format>", "output format").choices(["table", "json"]).default("table"));
  addConnectionOptions(command);
  return command.action(async (flags: PsFlags) => finish(await runPs(flags)));
}

/** One process as `ps -o json` prints it. */
export interface ProcessRow {
  id: string;
  pid: number | null;
  status: ProcessStatus;
  exitCode: number | null;
  signal: string | null;
  /** Why an exited process ended (`exited`, `signaled`, `killed_on_request`, `out_of_memory`...); null while it runs. */
  cause: ExitCause | null;
  sessionId: string | null;
  startTime: string;
  endTime: string | null;
  command: string;
  args: string[];
  /** What an exited process's tree used (CPU microseconds, peak memory bytes...); null while it runs or where unknown. */
  usage: ResourceUsage | null;
}

/** Runs `sandbox ps`. */
export async function runPs(flags: PsFlags): Promise<number> {
  const sandbox = await openSandbox(flags, { sessionId: flags.session });
  try {
    const statuses = flags.all === true ? undefined : liveStatuses;
    const handles = await sandbox.listProcesses({ all: flags.session === undefined, statuses });
    const rows = handles.map(toRow);
    if (flags.output === "json") process.stdout.write(jsonForTerminal(rows));
    else if (flags.quiet === true) process.stdout.write(rows.map((row) => `${escapeControls(row.id)}\n`).join(""));
    else process.stdout.write(table(rows, new Date()));
    return exitCodes.ok;
  } finally {
    await closeSandbox(sandbox);
  }
}

function toRow(handle: CommandHandle): ProcessRow {
  return {
    id: handle.id,
    pid: handle.pid ?? null,
    status: handle.status,
    exitCode: handle.exitCode ?? null,
    signal: handle.exit?.signal ?? null,
    cause: handle.exit?.cause ?? null,
    sessionId: handle.sessionId ?? null,
    startTime: handle.startTime.toISOString(),
    endTime: handle.endTime?.toISOString() ?? null,
    command: handle.command,
    args: [...handle.args],
    usage: handle.exit?.usage ?? null,
  };
}

/** The rows as a table with a header, columns padded to their widest cell. */
function table(rows: readonly ProcessRow[], now: Date): string {
  const header = ["ID", "PID", "STATUS", "AGE", "SESSION", "COMMAND"];
  // Every cell is escaped: a command line (or an id, a session) must not drive the terminal it is shown on.
  const cells = rows.map((row) =>
    [
      row.id,
      row.pid === null ? "-" : String(row.pid),
      statusText(row),
      age(new Date(row.startTime), now),
      row.sessionId ?? "-",
      [row.command, ...row.args]
        .map((word, index) => (index === 0 && row.args.length === 0 ? word : shellQuote(word)))
        .join(" "),
    ].map(escapeControls),
  );
  const widths = header.map((title, column) => Math.max(title.length, ...cells.map((line) => line[column].length)));
  return `${[header, ...cells]
    .map((line) =>
      line.map((cell, column) => (column === line.length - 1 ? cell : cell.padEnd(widths[column]))).join("  "),
    )
    .join("\n")}\n`;
}

/**
 * `running`, `completed (0)`, `failed (3)`, `killed (SIGTERM)`; with the cause where it says more than the
 * exit itself: `killed (SIGKILL, killed for memory)`, `killed (SIGTERM, killed on request)`.
 */
function statusText(row: ProcessRow): string {
  const how = row.signal ?? (row.exitCode === null ? undefined : String(row.exitCode));
  if (how === undefined) return row.status;
  const cause = row.cause === null || row.cause === "exited" ? "" : `, ${describeExitCause(row.cause)}`;
  return `${row.status} (${how}${cause})`;
}

/** How long ago `start` was, as kubectl's AGE column says it: 42s, 5m, 3h, 2d. */
function age(start: Date, now: Date): string {
  const seconds = Math.max(0, Math.floor((now.getTime() - start.getTime()) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86_400)}d`;
}

/** A word as a POSIX shell would need it written: as is when safe, else in single quotes. */
function shellQuote(word: string): string {
  if (/^[\w@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replaceAll("'", `'\\''`)}'`;
}
