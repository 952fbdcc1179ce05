import { Command, Option } from "commander";
import { classifyFailure, sandboxV1, toSandboxError, type CommandHandle, type Sandbox } from "../../../client/index.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { escapeControls, jsonForTerminal } from "../escape.js";
import { CliError, exitCodes } from "../exit-codes.js";
import { BrokenPipeError, LocalOutput } from "../local-output.js";
import { onSignals, signalExitCode, sigpipeExitCode } from "../signals.js";
import {
  addSpecOptions,
  commandArgumentHelp,
  limitsOf,
  readEnvFiles,
  retentionOf,
  retentionSpecOf,
  type SpecFlags,
} from "../spec-options.js";
import { StdinRelay, type InputTarget } from "../stdin-relay.js";
import { onTerminalResize, RawMode, terminalSize } from "../terminal.js";
import { describeExitCause, exitCauseFromProto, killOriginFromProto } from "../../../shared/exit-cause.js";

/** The flags of `sandbox exec`. */
export interface ExecFlags extends SpecFlags, ConnectionFlags {
  /** Output format (-o): the command's bytes on this terminal's streams, or one JSON object at the end. */
  output?: "raw" | "json";
}

/** Creates the `exec` command; `finish` receives its exit code. */
export function createExecCommand(finish: (code: number) => void): Command {
  const command = new Command("exec")
    .summary("run a command in the sandbox and wait for it")
    .description(
      "Run a command in the sandbox and wait for it, as `docker exec` and `kubectl exec` do: its stdout and stderr " +
        "arrive on this terminal's own streams byte for byte, and this exits with its exit code (128 + n when signal n " +
        "ended it; 125 when sandbox itself failed). The command is killed if this client goes away.\n\n" +
        "Ctrl-C sends SIGINT to the command and a second Ctrl-C abandons it (the daemon kills it); with -it, Ctrl-C " +
        "is typed into the command's terminal, as every other key is.",
    )
    .usage("[options] [--] <command> [args...]");
  addSpecOptions(command, {
    interactive: "pass this terminal's stdin to the command; its end (Ctrl-D, end of a pipe) is passed on",
    tty: "run the command in a pseudo-terminal of this terminal's size; with -i this terminal goes raw until the end",
  });
  command.addOption(
    new Option(
      "-o, --output <format>",
      "raw: the command's bytes as they come; json: one object {id, exitCode, signal, timedOut, cause, stdout, stderr, usage, dropped} at the end (not with -i or -t)",
    )
      .choices(["raw", "json"])
      .default("raw"),
  );
  addConnectionOptions(command);
  return command
    .argument("<command...>", commandArgumentHelp)
    .passThroughOptions()
    .action(async (argv: string[], flags: ExecFlags) => finish(await runExec(argv, flags)));
}

/** Runs `sandbox exec` and resolves with its exit code; throws a CliError or SandboxError when sandbox itself fails. */
export async function runExec(argv: string[], flags: ExecFlags): Promise<number> {
  flags = { ...flags, env: { ...readEnvFiles(flags.envFile), ...flags.env } };
  if (flags.tty === true && flags.interactive === true && !process.stdin.isTTY) {
    throw new CliError("the input device is not a TTY: drop -t, or run this from a terminal");
  }
  if (flags.output === "json" && (flags.interactive === true || flags.tty === true))
    throw new CliError("-o json collects the output: drop -i and -t", { usage: true });
  const sandbox = await openSandbox(flags);
  try {
    if (flags.output === "json") return await execToJson(sandbox, argv, flags);
    return await new ExecSession(sandbox, argv, flags).run();
  } finally {
    await closeSandbox(sandbox);
  }
}

/**
 * `exec -o json`: runs the command to its end (through Exec, so it dies with this client), then prints one
 * object with its id, exit code, signal, whether --timeout killed it, its output as text and what of it was
 * dropped (nothing: Exec hands over every byte); exits with its code.
 */
async function execToJson(sandbox: Sandbox, argv: string[], flags: ExecFlags): Promise<number> {
  // No limit unless --timeout, as for a plain exec (run's seconds; 0 is none).
  const finished = await sandbox.run(argv[0], {
    args: argv.slice(1),
    env: flags.env,
    cwd: flags.workdir,
    timeout: (flags.timeout ?? 0) / 1000,
    limits: limitsOf(flags),
    retention: retentionOf(flags),
  });
  process.stdout.write(
    jsonForTerminal({
      id: finished.id,
      exitCode: finished.exitCode,
      signal: finished.signal ?? null,
      timedOut: finished.timedOut,
      cause: finished.cause,
      stdout: finished.stdout(),
      stderr: finished.stderr(),
      usage: finished.exit.usage ?? null,
      // What the output above lacks: nothing, as Exec hands over every byte (kept for scripts that check).
      dropped: finished.dropped.map((gap) => ({ stream: gap.stream, offset: gap.offset, bytes: gap.missedBytes })),
    }),
  );
  return finished.exitCode;
}

/** The ResourceLimits message of exec's --memory, --cpus and --tasks; undefined for none. */
function limitsSpec(flags: ExecFlags) {
  const limits = limitsOf(flags);
  if (limits === undefined) return undefined;
  return {
    memoryBytes: limits.memoryBytes === undefined ? undefined : BigInt(limits.memoryBytes),
    cpuMillis: limits.cpus === undefined ? undefined : Math.max(1, Math.round(limits.cpus * 1000)),
    maxTasks: limits.maxTasks,
  };
}

/** Where an exec session is. */
type SessionState =
  | { kind: "starting" }
  | { kind: "running"; processId: string; interrupted: boolean }
  /** This client gave up on the command because of a local signal; the exit code is 128 + its number. */
  | { kind: "abandoned"; signal: NodeJS.Signals };

/**
 * ExecSession is one `sandbox exec`: the command runs through the Exec call (so the daemon kills
 * it when this client goes away, and slows it rather than dropping output when this terminal is
 * slow), its output goes to this process's stdout and stderr, and with -i this process's stdin goes
 * to it over SendInput. With -t its terminal follows this one's size, and with -it this terminal is
 * raw until the end, whatever ends it.
 */
class ExecSession {
  private state: SessionState = { kind: "starting" };
  private readonly call = new AbortController();
  private readonly output = new LocalOutput();
  private readonly cleanups: (() => void)[] = [];
  private handle?: Promise<CommandHandle>;

  constructor(
    private readonly sandbox: Sandbox,
    private readonly argv: string[],
    private readonly flags: ExecFlags,
  ) {}

  async run(): Promise<number> {
    this.cleanups.push(onSignals(["SIGINT", "SIGTERM", "SIGHUP"], (signal) => this.localSignal(signal)));
    try {
      const size = this.flags.tty === true ? terminalSize() : undefined;
      const events = this.sandbox.client.exec(
        {
          spec: {
            command: this.argv[0],
            args: this.argv.slice(1),
            env: this.flags.env,
            cwd: this.flags.workdir ?? "",
            timeoutMs: this.flags.timeout ?? 0,
            sessionId: this.sandbox.sessionId,
            limits: limitsSpec(this.flags),
            stdin: this.flags.interactive === true,
            retention: retentionSpecOf(this.flags),
            pty:
              this.flags.tty === true
                ? { cols: size?.cols ?? 0, rows: size?.rows ?? 0, term: process.env.TERM ?? "" }
                : undefined,
          },
        },
        { signal: this.call.signal },
      );
      for await (const response of events) {
        const event = response.event;
        if (event.case === "started") this.started(event.value.processId);
        else if (event.case === "output")
          await this.output.write(
            event.value.stream === sandboxV1.OutputStream.STDERR ? "stderr" : "stdout",
            event.value.data,
          );
        else if (event.case === "exited") {
          const code = this.exited(event.value);
          // As a local command killed by SIGPIPE: the reader of our output went away before the end.
          return this.output.brokenPipe ? sigpipeExitCode : code;
        }
      }
      throw new CliError("the daemon ended the call without the command's exit");
    } catch (error) {
      if (this.state.kind === "abandoned") return signalExitCode(this.state.signal) ?? exitCodes.relayFailure;
      // The reader of our output went away (`| head`): leaving cancels the call, which kills the command.
      if (error instanceof BrokenPipeError) return sigpipeExitCode;
      if (error instanceof CliError) throw error;
      // A connection cut or reset under the call: say that, not the transport's code.
      if (classifyFailure(error, false) !== "fatal") {
        throw new CliError(`lost the connection to the daemon: ${toSandboxError(error).message}`, { cause: error });
      }
      throw toSandboxError(error);
    } finally {
      this.cleanup();
      this.call.abort();
    }
  }

  /** The command was spawned: resizes and input can go to it now. */
  private started(processId: string): void {
    if (this.state.kind !== "starting") return;
    this.state = { kind: "running", processId, interrupted: false };
    if (this.flags.tty === true) {
      this.cleanups.push(
        onTerminalResize(
          (size) =>
            void this.inputHandle()
              .then((handle) => handle.resize(size.cols, size.rows))
              .catch(() => {}),
        ),
      );
    }
    if (this.flags.interactive !== true) return;
    if (this.flags.tty === true && process.stdin.isTTY) {
      const raw = RawMode.enter(process.stdin);
      this.cleanups.push(() => raw.restore());
    }
    const target: InputTarget = {
      sendInput: async (data) => (await this.inputHandle()).sendInput(data),
      closeInput: async () => (await this.inputHandle()).closeInput(),
    };
    // Input that cannot be delivered means the command exited or closed its stdin: its exit follows.
    const relay = new StdinRelay(process.stdin, target, { closeAtEnd: true, onError: () => {} });
    this.cleanups.push(() => relay.stop());
  }

  /**
   * The command exited: its exit code, after a line on stderr when it could not start, ran out of
   * time, or was killed by something other than itself or this client: for memory, at the daemon's
   * shutdown, by a kill from another client, or in a way the daemon cannot tell.
   */
  private exited(exited: sandboxV1.ProcessExited): number {
    this.cleanup();
    const code = exited.exitCode ?? signalExitCode(exited.signal);
    if (code === undefined)
      throw new CliError(`the command ended without an exit code (signal ${JSON.stringify(exited.signal)})`);
    if (exited.error !== "") process.stderr.write(`sandbox: ${escapeControls(exited.error)}\n`);
    if (exited.timedOut)
      process.stderr.write(`sandbox: the command ran past --timeout and was killed (${exited.signal || "SIGKILL"})\n`);
    const cause = exitCauseFromProto(exited.cause);
    const origin = exited.causeDetail && killOriginFromProto(exited.causeDetail.killOrigin);
    // This client's own kills (Ctrl-C passed on, a cancel) and a signal from inside say nothing new.
    const told =
      cause === "out_of_memory" ||
      cause === "daemon_shutdown" ||
      cause === "unknown" ||
      (cause === "killed_on_request" && (origin === "kill_all" || (origin === "kill_process" && !this.interrupted)));
    if (told) {
      const how = exited.signal === "" ? `exit code ${code}` : exited.signal;
      process.stderr.write(`sandbox: ${describeExitCause(cause, { killOrigin: origin })} (${how})\n`);
    }
    return code;
  }

  /** Whether this client passed a SIGINT on to the command (its kill is then this client's own). */
  private get interrupted(): boolean {
    return this.state.kind === "running" && this.state.interrupted;
  }

  /**
   * A signal reached this process. SIGINT (Ctrl-C without a raw terminal) is passed to the command
   * once, as `docker run` passes it; a second one, SIGTERM or SIGHUP abandon the command:
   * cancelling the call makes the daemon kill it.
   */
  private localSignal(signal: NodeJS.Signals): void {
    const state = this.state;
    if (signal === "SIGINT" && state.kind === "running" && !state.interrupted) {
      state.interrupted = true;
      void this.inputHandle()
        .then((handle) => handle.kill("SIGINT", { gracePeriodMs: -1 }))
        .catch(() => {});
      return;
    }
    if (state.kind === "abandoned") return;
    this.state = { kind: "abandoned", signal };
    this.call.abort();
  }

  /** A handle of the running command for input, resizes and signals; made on first use. */
  private inputHandle(): Promise<CommandHandle> {
    const state = this.state;
    if (state.kind !== "running") return Promise.reject(new CliError("the command is not running"));
    this.handle ??= this.sandbox.attach(state.processId);
    return this.handle;
  }

  /** Stops relaying and puts the terminal back; runs once, whichever way the session ends. */
  private cleanup(): void {
    for (const cleanup of this.cleanups.splice(0).reverse()) cleanup();
  }
}
