import { spawn, type ChildProcess } from "node:child_process";
import { repositoryRoot } from "./tools.js";
import { waitFor } from "./processes.js";

/** A sandboxd started as its own OS process, as an operator runs it. */
export interface DaemonProcess {
  /** The outermost process started (node, npm, the one-file binary...). */
  child: ChildProcess;
  /** The URL the daemon printed it listens on. */
  url: string;
  /** Everything the daemon wrote to stderr so far (its log lines). */
  stderr(): string;
  /** Resolves once the outermost process has exited. */
  exited(): Promise<void>;
}

/** How {@link startDaemonProcess} starts the daemon: the program and its arguments before the daemon's flags. */
export interface DaemonCommand {
  file: string;
  args?: readonly string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Start it as the leader of a process group of its own, as a shell starts a foreground job. */
  detached?: boolean;
  /** Give it an IPC channel, as `child_process.fork` and process managers such as PM2 do. */
  ipc?: boolean;
}

/** The daemon from source through tsx, as the tests of a checkout run it. */
export const daemonFromSource: DaemonCommand = {
  file: process.execPath,
  args: ["--import", "tsx", "src/cli/sandboxd.ts"],
  cwd: repositoryRoot,
};

/**
 * Starts the daemon as a separate process with `--port 0` and the given flags, and resolves once it
 * logged the URL it listens on.
 */
export async function startDaemonProcess(
  flags: readonly string[],
  command: DaemonCommand = daemonFromSource,
): Promise<DaemonProcess> {
  const child = spawn(command.file, [...(command.args ?? []), "--port", "0", ...flags], {
    cwd: command.cwd ?? repositoryRoot,
    env: command.env ?? process.env,
    stdio: command.ipc === true ? ["ignore", "ignore", "pipe", "ipc"] : ["ignore", "ignore", "pipe"],
    detached: command.detached ?? false,
  });
  let stderr = "";
  child.stderr!.on("data", (data: Buffer) => (stderr += data.toString()));
  const exit = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url: string = (await waitFor<string | undefined>(
    () =>
      /listening on (\S+)/.exec(stderr)?.[1] ??
      (child.exitCode !== null || child.signalCode !== null
        ? `exited (${child.exitCode ?? child.signalCode}): ${stderr}`
        : undefined),
    {
      timeoutMs: 30_000,
      what: "the daemon to listen",
    },
  )) as string;
  if (url.startsWith("exited (")) throw new Error(`the daemon exited before it listened; it said:\n${stderr}`);
  return { child, url, stderr: () => stderr, exited: () => exit };
}
