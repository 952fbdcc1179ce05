import path from "node:path";
import { Command, InvalidArgumentError, Option } from "commander";
import type { FileInfo, FileKind } from "../../../client/index.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { escapeControls, jsonForTerminal } from "../escape.js";
import { exitCodes } from "../exit-codes.js";
import { BrokenPipeError, LocalOutput } from "../local-output.js";

/** The flags of `sandbox ls`. */
export interface LsFlags extends ConnectionFlags {
  /** Long format (-l). */
  long?: boolean;
  /** Entries whose name starts with a dot too (-a). */
  all?: boolean;
  /** Levels of subdirectories to descend (--depth); 1 lists the directory's own entries. */
  depth: number;
  /** Output format (-o). */
  output: "text" | "json";
}

/** Creates the `ls` command; `finish` receives its exit code. */
export function createLsCommand(finish: (code: number) => void): Command {
  const command = new Command("ls")
    .summary("list a directory in the sandbox")
    .description(
      "List a directory in the sandbox (the daemon's first workspace root by default; a path is relative to it, or " +
        "absolute inside a root), one name per line, sorted by path; a file is listed alone. -l adds the type and " +
        "permissions, owner, group, size in bytes, modification time (UTC) and a symlink's target, as ls -l does. " +
        "-o json prints an array of objects with path, name, type, size, mode, permissions, uid, gid, owner, group, " +
        "modifiedTime and symlinkTarget. --depth N descends N levels (names then relative to the directory listed).",
    )
    .argument("[path]", "the directory or file, in the sandbox (:PATH as cp writes it works too)", ".")
    .option("-l, --long", "long format: type, permissions, owner, group, size, time, name")
    .option("-a, --all", "include entries whose name starts with a dot")
    .option("--depth <n>", "levels to descend, 1 to 64", parseDepth, 1)
    .addOption(new Option("-o, --output <format>", "output format").choices(["text", "json"]).default("text"));
  addConnectionOptions(command);
  return command.action(async (target: string, flags: LsFlags) => finish(await runLs(target, flags)));
}

function parseDepth(text: string): number {
  const depth = Number(text);
  if (!Number.isInteger(depth) || depth < 1 || depth > 64)
    throw new InvalidArgumentError("a whole number from 1 to 64");
  return depth;
}

/** Runs `sandbox ls`. */
export async function runLs(argument: string, flags: LsFlags): Promise<number> {
  // `:path`, as cp writes the sandbox side, is the same path.
  const target = argument.startsWith(":") ? argument.slice(1) || "." : argument;
  const sandbox = await openSandbox(flags);
  const output = new LocalOutput();
  try {
    const info = await sandbox.files.stat(target, { followSymlinks: true });
    let rows: { name: string; entry: FileInfo }[];
    if (info.type === "directory") {
      const entries = await sandbox.files.list(target, { depth: flags.depth });
      rows = entries.map((entry) => ({ name: path.posix.relative(info.path, entry.path), entry }));
      if (flags.all !== true) rows = rows.filter((row) => !row.name.split("/").some((part) => part.startsWith(".")));
    } else {
      rows = [{ name: target, entry: await sandbox.files.stat(target) }];
    }
    const text =
      flags.output === "json"
        ? jsonForTerminal(rows.map((row) => row.entry))
        : flags.long === true
          ? longFormat(rows)
          : rows.map((row) => `${escapeControls(row.name)}\n`).join("");
    await output.write("stdout", Buffer.from(text));
    return exitCodes.ok;
  } catch (error) {
    if (error instanceof BrokenPipeError) return exitCodes.ok;
    throw error;
  } finally {
    await closeSandbox(sandbox);
  }
}

/** The letter `ls -l` shows for each kind of entry. */
const typeLetters: Record<FileKind, string> = {
  file: "-",
  directory: "d",
  symlink: "l",
  fifo: "p",
  socket: "s",
  "character-device": "c",
  "block-device": "b",
};

/** Rows as `ls -l` writes them, columns aligned: `drwxr-xr-x  root  root  4096  2026-11-25 04:48  name`. */
function longFormat(rows: readonly { name: string; entry: FileInfo }[]): string {
  // Names, link targets, owners and groups come from the sandbox: their controls are shown escaped.
  const cells = rows.map(({ name, entry }) =>
    [
      `${typeLetters[entry.type]}${entry.permissions}`,
      entry.owner || String(entry.uid),
      entry.group || String(entry.gid),
      String(entry.size),
      entry.modifiedTime.toISOString().slice(0, 16).replace("T", " "),
      entry.symlinkTarget === undefined ? name : `${name} -> ${entry.symlinkTarget}`,
    ].map(escapeControls),
  );
  const widths = [0, 1, 2, 3].map((column) => Math.max(...cells.map((line) => line[column].length)));
  return cells
    .map((line) =>
      [
        line[0],
        line[1].padEnd(widths[1]),
        line[2].padEnd(widths[2]),
        line[3].padStart(widths[3]),
        line[4],
        line[5],
      ].join("  "),
    )
    .map((line) => `${line}\n`)
    .join("");
}
