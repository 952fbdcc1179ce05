import { Command, Option } from "commander";
import type { ListeningPort } from "../../../client/index.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { escapeControls, jsonForTerminal } from "../escape.js";
import { exitCodes } from "../exit-codes.js";
import { resolveProcessId } from "../process-ids.js";

/** The flags of `sandbox ports`. */
export interface PortsFlags extends ConnectionFlags {
  /** Only the ports of this process's tree (--process). */
  process?: string;
  /** Output format (-o). */
  output: "table" | "json";
}

/** Creates the `ports` command; `finish` receives its exit code. */
export function createPortsCommand(finish: (code: number) => void): Command {
  const command = new Command("ports")
    .summary("list the TCP ports listening in the sandbox")
    .description(
      "List the TCP ports listening inside the sandbox, lowest first, with the pid and program holding each and, " +
        "when it is one of the daemon's processes or was started by one, that process's id: the port a dev server " +
        "actually took. -o json prints an array of objects with port, address, ipv6, pid, program and processId.",
    )
    .option("--process <id>", "only the ports of this process and the processes it started")
    .addOption(new Option("-o, --output <format>", "output format").choices(["table", "json"]).default("table"));
  addConnectionOptions(command);
  return command.action(async (flags: PortsFlags) => finish(await runPorts(flags)));
}

/** Runs `sandbox ports`. */
export async function runPorts(flags: PortsFlags): Promise<number> {
  const sandbox = await openSandbox(flags);
  try {
    const processId = flags.process === undefined ? undefined : await resolveProcessId(sandbox, flags.process);
    const ports = await sandbox.listPorts({ processId });
    if (flags.output === "json")
      process.stdout.write(
        jsonForTerminal(ports.map((port) => ({ ...port, pid: port.pid ?? null, processId: port.processId ?? null }))),
      );
    else process.stdout.write(table(ports));
    return exitCodes.ok;
  } finally {
    await closeSandbox(sandbox);
  }
}

/** The ports as a table with a header, columns padded to their widest cell. */
function table(ports: readonly ListeningPort[]): string {
  const header = ["PORT", "ADDRESS", "PID", "PROGRAM", "PROCESS"];
  const cells = ports.map((port) =>
    [
      String(port.port),
      port.address,
      port.pid === undefined ? "-" : String(port.pid),
      port.program || "-",
      port.processId ?? "-",
    ].map(escapeControls),
  );
  const widths = header.map((title, column) => Math.max(title.length, ...cells.map((line) => line[column].length)));
  return `${[header, ...cells]
    .map((line) =>
      line.map((cell, column) => (column === line.length - 1 ? cell : cell.padEnd(widths[column]))).join("  "),
    )
    .join("\n")}\n`;
}
