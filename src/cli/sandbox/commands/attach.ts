import { Command } from "commander";
import type { CommandHandle, Sandbox } from "../../../client/index.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { escapeControls } from "../escape.js";
import { CliError, exitCodes } from "../exit-codes.js";
import { aboutProcess } from "../failure.js";
import { BrokenPipeError, LocalOutput } from "../local-output.js";
import { onSignals, signalExitCode, sigpipeExitCode } from "../signals.js";
import { resolveProcessId } from "../process-ids.js";
import { StdinRelay } from "../stdin-relay.js";
import { onTerminalResize, RawMode, terminalSize } from "../terminal.js";

/** The flags of `sandbox attach`. */
export interface AttachFlags extends ConnectionFlags {
  /** Pass this terminal's stdin to the process (-i). */
  interactive?: boolean;
}

/** Ctrl-P Ctrl-Q: typed in a row into a raw terminal, they detach, as in `docker attach`. */
const detachKeys = Uint8Array.of(0x10, 0x11);

/** Creates the `attach` command; `finish` receives its exit code. */
export function createAttachCommand(finish: (code: number) => void): Command {
  const command = new Command("attach")
    .summary("follow a background process's live output (and feed it with -i)")
    .description(
      "Follow a background process's output from now on (`sandbox logs` shows what came before) on this terminal's " +
        "stdout and stderr, until it exits; this then exits with its exit code (125 when sandbox itself fails). " +
        "With -i this terminal's stdin goes to the process, and its end is passed on. A process started with -t gets a " +
        "raw terminal of this terminal's size: keys, Ctrl-C included, go to the process, and Ctrl-P Ctrl-Q detaches " +
        "(saying the process is still running). " +
        "Detaching (Ctrl-C without a raw terminal) leaves the process running.",
    )
    .option("-i, --interactive", "pass this terminal's stdin to the process (it must have been started with -i or -t)");
  addConnectionOptions(command);
  return command
    .argument("<id>", "the process id, or the start of one")
    .action(async (id: string, flags: AttachFlags) => finish(await runAttach(id, flags)));
}

/** Runs `sandbox attach` and resolves with the process's exit code, or 0 when detached with the keys. */
export async function runAttach(id: string, flags: AttachFlags): Promise<number> {
  const sandbox = await openSandbox(flags);
  try {
    return await new AttachSession(sandbox, await resolveProcessId(sandbox, id), flags).run();
  } finally {
    await closeSandbox(sandbox);
  }
}

/** Why an attach session stopped following before the exit. */
type Detached = { kind: "keys" } | { kind: "signal"; signal: NodeJS.Signals };

/**
 * AttachSession follows one background process from its current output offsets through the SDK's
 * resumable handle, and with -i relays this terminal's input (raw, with resizes, for a process with
 * a terminal). Leaving, however it happens, detaches: the process keeps running.
 */
class AttachSession {
  private detached?: Detached;
  private handle?: CommandHandle;
  private readonly cleanups: (() => void)[] = [];

  constructor(
    private readonly sandbox: Sandbox,
    private readonly id: string,
    private readonly flags: AttachFlags,
  ) {}

  async run(): Promise<number> {
    // The record says where the output is now and whether the process can take input.
    let info;
    try {
      info = (await this.sandbox.client.getProcess({ processId: this.id })).process;
    } catch (error) {
      throw aboutProcess(error, this.id);
    }
    if (info === undefined) throw new CliError(`the daemon sent no record of process ${this.id}`);
    const interactive = this.flags.interactive === true;
    if (interactive && !info.pty && !info.stdin)
      throw new CliError(`process ${this.id} takes no input: start it with -i or -t`);
    const handle = await this.sandbox
      .attach(this.id, { stdout: Number(info.stdoutBytes), stderr: Number(info.stderrBytes) })
      .catch((error: unknown) => {
        throw aboutProcess(error, this.id);
      });
    this.handle = handle;
    const output = new LocalOutput();
    this.cleanups.push(onSignals(["SIGINT", "SIGTERM", "SIGHUP"], (signal) => this.detach({ kind: "signal", signal })));
    try {
      if (interactive) this.relayInput(handle, info.pty);
      for await (const chunk of handle) await output.write(chunk.stream, chunk.data);
      const finished = await handle.result;
      this.cleanup();
      if (finished.timedOut)
        process.stderr.write(`sandbox: process ${escapeControls(this.id)} ran past its timeout and was killed\n`);
      return finished.exitCode;
    } catch (error) {
      const detached = this.detached;
      if (detached !== undefined)
        return detached.kind === "keys" ? exitCodes.ok : (signalExitCode(detached.signal) ?? exitCodes.relayFailure);
      if (error instanceof BrokenPipeError) return sigpipeExitCode;
      throw aboutProcess(error, this.id);
    } finally {
      this.cleanup();
    }
  }

  /** Relays this terminal's input to the process; raw, sized and with detach keys when both have terminals. */
  private relayInput(handle: CommandHandle, pty: boolean): void {
    const raw = pty && process.stdin.isTTY;
    if (raw) {
      const mode = RawMode.enter(process.stdin);
      this.cleanups.push(() => mode.restore());
      const resize = (size: { cols: number; rows: number }) => void handle.resize(size.cols, size.rows).catch(() => {});
      const size = terminalSize();
      if (size !== undefined) resize(size);
      this.cleanups.push(onTerminalResize(resize));
    }
    const relay = new StdinRelay(process.stdin, handle, {
      closeAtEnd: true,
      detachKeys: raw ? detachKeys : undefined,
      onDetach: () => this.detach({ kind: "keys" }),
      // Input that cannot be delivered means the process exited or closed its stdin: its exit follows.
      onError: () => {},
    });
    this.cleanups.push(() => relay.stop());
  }

  /** Stops following; the process keeps running. After the keys, says so once the terminal is back to normal. */
  private detach(reason: Detached): void {
    if (this.detached !== undefined) return;
    this.detached = reason;
    this.cleanup();
    this.handle?.detach();
    if (reason.kind === "keys") {
      const id = escapeControls(this.id);
      process.stderr.write(
        `\r\nsandbox: detached from ${id}; it is still running (sandbox attach ${id} to come back, sandbox kill ${id} to stop it)\r\n`,
      );
    }
  }

  /** Stops relaying and puts the terminal back; runs once, whichever way the session ends. */
  private cleanup(): void {
    for (const cleanup of this.cleanups.splice(0).reverse()) cleanup();
  }
}
