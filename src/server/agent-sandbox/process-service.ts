import { constants } from "node:os";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  type ProcessService,
  Signal,
  type ProcessConfig,
  type PTY,
  type StartRequest,
  type StartResponseSchema,
} from "../../../gen/process/v1/process_pb.js";
import { onAbort, raceSignal } from "../../shared/abort.js";
import type { ManagedProcess, ProcessExit, ProcessManager, ProcessSpec, SignalName } from "../../process/index.js";
import {
  clientGoneKey,
  peerKey,
  sandboxError,
  throwIfShuttingDown,
  withConnectErrors,
  type ProcessAudit,
  callEndReason,
} from "../rpc/index.js";

/** Dependencies of {@link createProcessService}. */
export interface ProcessServiceOptions {
  /** Runs the processes: the daemon's one process manager, shared with sandbox.v1. */
  manager: ProcessManager;
  /** Milliseconds between SIGTERM and SIGKILL when an Execute caller goes away. Default 1000. */
  cancelGracePeriodMs?: number;
  /** Told of every process started, with who asked. Default: nothing. */
  audit?: ProcessAudit;
}

/** Response header naming the sandbox.v1 record of a process started by Start or Execute. */
export const processIdHeader = "sandboxd-process-id";
/** Execute's response trailers: how many of the first bytes of each stream were dropped past the output limit. */
export const droppedBytesTrailers = {
  stdout: "sandboxd-stdout-dropped-bytes",
  stderr: "sandboxd-stderr-dropped-bytes",
} as const;

/** The signals of process.v1, by enum value. */
const signalNames: ReadonlyMap<Signal, SignalName> = new Map([
  [Signal.SIGINT, "SIGINT"],
  [Signal.SIGTERM, "SIGTERM"],
  [Signal.SIGKILL, "SIGKILL"],
]);

/**
 * Creates the implementation of KEP-539.2's `process.v1.ProcessService` on top of the daemon's process
 * manager: every process it starts is a sandbox.v1 record as well (ListProcesses, StreamLogs, metrics,
 * audit), with the same confinement, user, limits and state directory, since the manager applies them.
 * A process is named by its OS pid, which leads its own process group.
 *
 * - Start reads all output through a pinned reader (a slow client pauses the command, never loses a
 *   byte); once its caller has the process id the command outlives the stream, and is killed only by a
 *   deadline (its time limit) or a signal.
 * - Execute answers with the newest output that fits a default gRPC client (see {@link maxExecuteOutputBytes})
 *   and the daemon's `--max-output-bytes`, saying in trailers how much was dropped, and kills the group when
 *   its caller goes away or its deadline passes.
 * - A program that cannot be started exits 127 (not found) or 126 (not executable) with the reason on
 *   stderr, as `sh -c` reports it; Start's init then carries process id 0.
 */
export function createProcessService(options: ProcessServiceOptions): ServiceImpl<typeof ProcessService> {
  const { manager } = options;
  const cancelGracePeriodMs = options.cancelGracePeriodMs ?? 1000;
  const running = (pid: number) => withConnectErrors(() => manager.getRunning(pid));
  const audit = (managed: ManagedProcess, context: HandlerContext) =>
    options.audit?.started(managed, context.values.get(peerKey), manager.commandUser(false));

  return {
    async *start(request: StartRequest, context: HandlerContext) {
      const spec = toSpec(request.config, context, { pty: request.pty, stdin: true });
      const signal = context.signal;
      const gone = context.values.get(clientGoneKey) ?? signal;
      const started = await withConnectErrors(() => manager.startPinned(spec, { signal: gone }));
      const managed = started.process;
      audit(managed, context);
      context.responseHeader.set(processIdHeader, managed.id);
      // A caller gone before it could learn the process id leaves a process nobody can reach by it.
      if (gone.aborted || signal.aborted) {
        started.release();
        managed.kill("SIGKILL", -1, callEndReason(context));
        throwIfShuttingDown(signal);
        throw sandboxError("CANCELED", "the call was cancelled");
      }
      // The generator may be parked on a write the caller never reads: let go of the reader from the
      // signal itself, so the command is not held paused. It runs on (see the service's doc).
      const releasing = onAbort(signal, () => started.release());
      try {
        yield { event: { case: "init", value: { processId: managed.pid } } } satisfies StartEvent;
        if (managed.exit?.status === "error") {
          yield { event: { case: "stderr", value: startFailure(managed.exit) } } satisfies StartEvent;
        } else {
          for await (const item of started.reader.items({ follow: true, signal })) {
            // A pinned reader is never dropped from under, so only chunks come.
            if (item.kind === "chunk") yield { event: { case: item.stream, value: item.data } } satisfies StartEvent;
          }
        }
        throwIfShuttingDown(signal);
        // A deadline ends the stream as DEADLINE_EXCEEDED, never as if the command had finished.
        if (signal.aborted) throw signal.reason;
        // The output has ended, so the exit is known: this settles at once.
        const exit = await managed.exited;
        yield { event: { case: "exit", value: { exitCode: exitCodeOf(exit) } } } satisfies StartEvent;
        started.delivered();
      } finally {
        releasing.dispose();
        started.release();
      }
    },

    async execute(request, context) {
      const spec = toSpec(request.config, context, { stdin: false });
      const signal = context.signal;
      const gone = context.values.get(clientGoneKey) ?? signal;
      const managed = await withConnectErrors(() => manager.start(spec, { signal: gone }));
      audit(managed, context);
      context.responseHeader.set(processIdHeader, managed.id);
      // Nobody waits for the answer any more: the command goes too (a deadline has already killed it).
      const stopping = onAbort(signal, () => managed.kill("SIGTERM", cancelGracePeriodMs, callEndReason(context)));
      let exit: ProcessExit;
      try {
        exit = await raceSignal(managed.exited, signal);
      } catch (reason) {
        throwIfShuttingDown(signal);
        throw reason;
      } finally {
        stopping.dispose();
      }
      if (exit.status === "error") return { exitCode: exitCodeOf(exit), stderr: startFailure(exit) };
      // All output is in (the exit comes after it). What the record could not keep were its oldest bytes, and
      // the answer keeps the newest that fit a gRPC client's default message limit.
      const kept = newestThatFit(
        managed.snapshotOutput("stdout"),
        managed.snapshotOutput("stderr"),
        maxExecuteOutputBytes,
      );
      const retainedFrom = managed.retainedFrom;
      context.responseTrailer.set(droppedBytesTrailers.stdout, String(retainedFrom.stdout + kept.cut.stdout));
      context.responseTrailer.set(droppedBytesTrailers.stderr, String(retainedFrom.stderr + kept.cut.stderr));
      return { exitCode: exitCodeOf(exit), stdout: kept.stdout, stderr: kept.stderr };
    },

    async writeStdin(request, context) {
      const managed = running(request.processId);
      const payload = request.payload;
      await withConnectErrors(async () => {
        if (payload.case === "eof") {
          managed.assertAcceptsInput();
          await managed.closeInput();
        } else if (payload.case === "input" && payload.value.length > 0) {
          await managed.write(payload.value, context.signal);
        } else {
          // Nothing to write, as the reference daemon accepts it: the process must still take input.
          managed.assertAcceptsInput();
        }
      });
      return {};
    },

    async sendSignal(request) {
      const managed = running(request.processId);
      const name = signalNames.get(request.signal);
      if (name === undefined) {
        throw sandboxError(
          "INVALID_ARGUMENT",
          `signal must be SIGNAL_SIGINT, SIGNAL_SIGTERM or SIGNAL_SIGKILL, got ${request.signal}`,
          { metadata: { field: "signal" } },
        );
      }
      withConnectErrors(() => managed.signal(name));
      return {};
    },

    async resizeTTY(request) {
      const managed = running(request.processId);
      withConnectErrors(() => managed.resize(request.cols, request.rows));
      return {};
    },
  };
}

type StartEvent = MessageInitShape<typeof StartResponseSchema>;

/**
 * Most output bytes, both streams together, an Execute answer carries: gRPC clients refuse messages over 4 MiB
 * unless told otherwise (grpcio's and grpc-go's default, the agent-sandbox SDK's channel among them), less room
 * for the rest of the message.
 */
export const maxExecuteOutputBytes = 4 * 1024 * 1024 - 64 * 1024;

/**
 * The newest bytes of each stream within `limit` bytes together: each stream keeps at least half of the limit
 * when it has that much, and what one does not use the other may. `cut` counts the bytes dropped from the start.
 */
export function newestThatFit(stdout: Uint8Array, stderr: Uint8Array, limit: number) {
  const half = Math.floor(limit / 2);
  const stderrKept = Math.min(stderr.length, Math.max(half, limit - stdout.length));
  const stdoutKept = Math.min(stdout.length, limit - stderrKept);
  return {
    stdout: stdout.subarray(stdout.length - stdoutKept),
    stderr: stderr.subarray(stderr.length - stderrKept),
    cut: { stdout: stdout.length - stdoutKept, stderr: stderr.length - stderrKept },
  };
}

/**
 * The process manager's spec of a request: argv as given (never a shell), the caller's deadline as the
 * command's time limit (SIGKILL of the group when it passes). INVALID_ARGUMENT without a command.
 */
function toSpec(
  config: ProcessConfig | undefined,
  context: HandlerContext,
  io: { pty?: PTY; stdin: boolean },
): ProcessSpec {
  const command = config?.command ?? [];
  if (command.length === 0 || command[0] === "") {
    throw sandboxError("INVALID_ARGUMENT", "config.command is required: the program and its arguments", {
      metadata: { field: "config.command" },
    });
  }
  const remainingMs = context.timeoutMs();
  return {
    command: command[0],
    args: command.slice(1),
    shell: false,
    env: config?.envVars,
    cwd: config?.cwd,
    timeoutMs: remainingMs === undefined ? 0 : Math.max(1, Math.ceil(remainingMs)),
    pty: io.pty && { cols: io.pty.cols, rows: io.pty.rows },
    stdin: io.stdin,
  };
}

/** A process.v1 exit code: the process's own, or 128 + n when signal n ended it, as a shell reports it. */
function exitCodeOf(exit: ProcessExit): number {
  if (exit.exitCode !== null) return exit.exitCode;
  const number = (constants.signals as Record<string, number>)[exit.signal ?? ""];
  return number === undefined ? 128 : 128 + number;
}

/** What a shell prints for a program it could not start. */
function startFailure(exit: ProcessExit): Uint8Array {
  return Buffer.from(`sandboxd: ${exit.error ?? "the program could not be started"}\n`);
}
