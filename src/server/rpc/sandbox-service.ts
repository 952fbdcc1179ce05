import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ConnectError, HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  SandboxService,
  ExecRequest,
  ExecResponseSchema,
  SendInputRequest,
  SendInputResponseSchema,
  StreamLogsRequest,
  StreamLogsResponseSchema,
} from "../../../gen/sandbox/v1/sandbox_pb.js";
import { onAbort, raceSignal } from "../../shared/abort.js";
import {
  defaultKillGracePeriodMs,
  parseSignal,
  releaseBufferedMemory,
  type ManagedProcess,
  type ProcessManager,
} from "../../process/index.js";
import {
  fromProtoSpec,
  fromProtoStatus,
  toProtoChunk,
  toProtoExit,
  toProtoGap,
  toProtoInfo,
  toProtoStartedInfo,
} from "./convert.js";
import { sandboxError, throwIfShuttingDown, withConnectErrors } from "./errors.js";
import { clientGoneKey, peerKey } from "./call-context.js";
import type { ProcessAudit } from "./process-audit.js";
import { pageSize, PageTokens } from "./page-token.js";
import { createReadinessHandlers } from "./readiness-handlers.js";
import { callEndReason } from "./kill-origin.js";

/** Dependencies of {@link createSandboxService}. */
export interface SandboxServiceOptions {
  /** Runs the processes. */
  manager: ProcessManager;
  /** Milliseconds between SIGTERM and SIGKILL when an Exec call is cancelled. Default 1000. */
  cancelGracePeriodMs?: number;
  /** Told of every process started, with who asked. Default: nothing. */
  audit?: ProcessAudit;
}

/**
 * Creates the implementation of sandbox.v1.SandboxService on top of a process manager. It holds no
 * state of its own but the key of its page tokens, so tests can build it without a network.
 *
 * Streams end with the daemon: the router's `shutdownSignal` (connectNodeAdapter's option) aborts
 * every call's signal with a SHUTTING_DOWN error, which a stream then ends with (UNAVAILABLE).
 */
export function createSandboxService(options: SandboxServiceOptions): ServiceImpl<typeof SandboxService> {
  const { manager } = options;
  const cancelGracePeriodMs = options.cancelGracePeriodMs ?? 1000;
  const pageTokens = new PageTokens();
  const lookup = (id: string): ManagedProcess =>
    withConnectErrors(() => {
      if (id === "")
        throw sandboxError("INVALID_ARGUMENT", "process_id is required", { metadata: { field: "process_id" } });
      return manager.get(id);
    });

  return {
    async *exec(request: ExecRequest, context: HandlerContext) {
      const spec = fromProtoSpec(request.spec);
      const signal = context.signal;
      const gone = context.values.get(clientGoneKey) ?? signal;
      const started = await withConnectErrors(() => manager.startPinned(spec, { signal: gone }));
      const managed = started.process;
      options.audit?.started(managed, context.values.get(peerKey), manager.commandUser(spec.sudo ?? false));
      // Cancelled while it started (a client that resets its calls at once): it must not run on.
      if (gone.aborted || signal.aborted) {
        started.release();
        managed.kill("SIGKILL", -1, callEndReason(context));
        throwIfShuttingDown(signal);
        throw sandboxError("CANCELED", "the call was cancelled");
      }
      const stop = () => {
        started.release();
        if (managed.exit === undefined) managed.kill("SIGTERM", cancelGracePeriodMs, callEndReason(context));
      };
      // The generator may be parked on a `yield` whose write never completes (the caller stopped
      // reading and then cancelled), so its `finally` cannot be relied on to run promptly: stop the
      // command from the signal itself.
      const stopping = onAbort(signal, stop);
      try {
        yield { event: { case: "started", value: toProtoStartedInfo(managed) } } satisfies ExecEvent;
        for await (const item of started.reader.items({ follow: true, signal, maxChunkBytes: maxOutputMessageBytes })) {
          // A pinned reader is never dropped from under, so only chunks come.
          if (item.kind === "chunk") yield { event: { case: "output", value: toProtoChunk(item) } } satisfies ExecEvent;
        }
        throwIfShuttingDown(signal);
        if (signal.aborted) return;
        // The output has ended, so the exit is known: this settles at once.
        const exit = await managed.exited;
        // The pinned reader never lags beyond what is retained: this stream dropped nothing.
        yield { event: { case: "exited", value: toProtoExit(exit, []) } } satisfies ExecEvent;
        // The caller has every byte and the exit: the record stays, its output is not worth keeping.
        started.delivered();
      } finally {
        // Reached on completion, cancel, deadline, disconnect and shutdown alike.
        stopping.dispose();
        stop();
      }
    },

    async startProcess(request, context) {
      const spec = fromProtoSpec(request.spec);
      const managed = await withConnectErrors(() =>
        manager.start(spec, { signal: context.values.get(clientGoneKey) ?? context.signal }),
      );
      options.audit?.started(managed, context.values.get(peerKey), manager.commandUser(spec.sudo ?? false));
      return { process: toProtoInfo(managed) };
    },

    async *streamLogs(request: StreamLogsRequest, context: HandlerContext) {
      const managed = lookup(request.processId);
      const from = { stdout: Number(request.stdoutOffset), stderr: Number(request.stderrOffset) };
      const reader = withConnectErrors(() => managed.readOutput(from));
      const signal = context.signal;
      yield { event: { case: "process", value: toProtoInfo(managed) } } satisfies LogsEvent;
      for await (const item of reader.items({ follow: request.follow, signal, maxChunkBytes: maxOutputMessageBytes })) {
        yield item.kind === "chunk"
          ? ({ event: { case: "output", value: toProtoChunk(item) } } satisfies LogsEvent)
          : ({ event: { case: "gap", value: toProtoGap(item) } } satisfies LogsEvent);
      }
      throwIfShuttingDown(signal);
      if (signal.aborted) return;
      if (managed.outputEnded) {
        // The output has ended, so the exit is known: this settles at once.
        const exit = await managed.exited;
        yield { event: { case: "exited", value: toProtoExit(exit, managed.droppedOutput()) } } satisfies LogsEvent;
      } else {
        const { stdout, stderr } = reader.consumedOffsets;
        yield {
          event: { case: "caughtUp", value: { stdoutOffset: BigInt(stdout), stderrOffset: BigInt(stderr) } },
        } satisfies LogsEvent;
      }
    },

    async *sendInput(requests: AsyncIterable<SendInputRequest>, context: HandlerContext) {
      const signal = context.signal;
      const iterator = requests[Symbol.asyncIterator]();
      const first = await iterator.next();
      if (first.done) return;
      throwIfShuttingDown(signal);
      if (first.value.input.case !== "open") {
        throw sandboxError("INVALID_ARGUMENT", "the first SendInput message must be open", {
          metadata: { field: "open" },
        });
      }
      const managed = lookup(first.value.input.value.processId);
      withConnectErrors(() => managed.assertAcceptsInput());
      yield { bytesWritten: BigInt(managed.bytesWritten), closed: managed.isInputClosed } satisfies InputAck;
      // Messages are read ahead of their answers by a pump of their own, a bounded number at a time
      // and only while stdin has room: a data message counts against the process's pending stdin
      // bytes and the daemon's budget as soon as it is read, and no further message is read while
      // either is full, so a process that does not read holds its writers back (HTTP/2 flow control
      // reaches the client) instead of the daemon buffering their messages. Data, end-of-input and
      // resizes are applied in order (the process orders them); a signal as it arrives, never behind
      // a write the process does not read, unless stdin was full before it. Answers stay in message order.
      const applied = createAppliedQueue(maxInputLookahead);
      let receivedBytes = 0;
      const pump = (async () => {
        try {
          for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
            throwIfShuttingDown(signal);
            const input = next.value.input;
            if (input.case === "data") receivedBytes += input.value.length;
            const done = applyInput(managed, input, signal);
            done.catch(() => {});
            await applied.push(done, signal);
            await withConnectErrors(() => managed.waitForInputRoom(signal));
          }
          applied.end();
        } catch (error) {
          applied.fail(error);
        }
      })();
      try {
        for (;;) {
          const next = await applied.shift(signal);
          if (next === undefined) break;
          const state = await next.applied;
          yield { bytesWritten: BigInt(managed.bytesWritten), closed: state.closed } satisfies InputAck;
          if (signal.aborted) return;
        }
      } finally {
        applied.fail(callEnded());
        // Not awaited: the pump may be waiting for a message the client will only send after an
        // answer this call no longer gives; it ends with the request stream.
        void pump.catch(() => {});
        // What the call read is garbage now or soon (written, or dropped with the call): worth a
        // collection once there is enough of it, as after output.
        releaseBufferedMemory(receivedBytes);
      }
    },

    async getProcess(request) {
      return { process: toProtoInfo(lookup(request.processId), true) };
    },

    async listProcesses(request) {
      const statuses = request.statuses.map(fromProtoStatus);
      const scope = { sessionId: request.sessionId, statuses: request.statuses };
      const size = pageSize(request.pageSize);
      const afterSequence = pageTokens.read(request.pageToken, scope);
      const page = withConnectErrors(() =>
        manager.listPage({ sessionId: request.sessionId, statuses }, { afterSequence, size }),
      );
      const last = page.processes.at(-1);
      return {
        processes: page.processes.map((managed) => toProtoInfo(managed)),
        nextPageToken: page.more && last !== undefined ? pageTokens.issue(last.sequence, scope) : "",
      };
    },

    async killProcess(request) {
      const managed = lookup(request.processId);
      const signal = withConnectErrors(() => parseSignal(request.signal));
      managed.kill(signal, gracePeriod(request.gracePeriodMs), "kill_process");
      return { process: toProtoInfo(managed) };
    },

    async killAllProcesses(request) {
      const signal = withConnectErrors(() => parseSignal(request.signal));
      const killedCount = withConnectErrors(() =>
        manager.killAll({ sessionId: request.sessionId, signal, gracePeriodMs: gracePeriod(request.gracePeriodMs) }),
      );
      return { killedCount };
    },

    async cleanupProcesses(request) {
      return {
        removedCount: withConnectErrors(() =>
          manager.cleanup({ sessionId: request.sessionId, processIds: request.processIds }),
        ),
      };
    },

    async getProcessLogs(request) {
      const managed = lookup(request.processId);
      return {
        processId: managed.id,
        stdout: managed.snapshotOutput("stdout"),
        stderr: managed.snapshotOutput("stderr"),
        stdoutOffset: BigInt(managed.retainedFrom.stdout),
        stderrOffset: BigInt(managed.retainedFrom.stderr),
        process: toProtoInfo(managed),
        head: {
          stdout: managed.snapshotHead("stdout"),
          stderr: managed.snapshotHead("stderr"),
          dropped: managed.droppedOutput().map(toProtoGap),
        },
      };
    },

    ...createReadinessHandlers({ manager, lookup }),
  };
}

/**
 * Most output bytes in one Exec or StreamLogs message. Each message takes what the command wrote
 * since the last one was sent (see `ReadOptions.maxChunkBytes`): a caller that keeps up gets each
 * write at once, one that lags gets fewer, larger messages, which cost less per byte on both sides
 * (connect-es alone: x0.54-0.59 the CPU per MB of 64 KiB messages). Just under 1 MiB, so that the
 * encoded message with its few bytes of fields fits the 1 MiB buffer protobuf-es's writer grows to
 * (a power of two: a message of a full MiB of output takes a 2 MiB one); well under the 4 MiB most
 * gRPC clients accept by default.
 */
export const maxOutputMessageBytes = 1024 * 1024 - 64;

/** Most SendInput messages read ahead of their answers. */
const maxInputLookahead = 64;

/** A queue of input messages being applied, in message order, holding at most `limit` unanswered. */
interface AppliedQueue {
  /** Adds one; waits while `limit` are unanswered. */
  push(applied: Promise<InputState>, signal: AbortSignal): Promise<void>;
  /** Takes the oldest (wrapped, so awaiting the take does not await the message); undefined once ended and empty. Rejects with the pump's failure. */
  shift(signal: AbortSignal): Promise<{ applied: Promise<InputState> } | undefined>;
  end(): void;
  fail(error: unknown): void;
}

function createAppliedQueue(limit: number): AppliedQueue {
  const items: Promise<InputState>[] = [];
  let ended = false;
  let failure: { error: unknown } | undefined;
  // One promise per change, settled and replaced by notify: every waiter wakes.
  let wake!: () => void;
  let changed = new Promise<void>((resolve) => (wake = resolve));
  const notify = () => {
    wake();
    changed = new Promise<void>((resolve) => (wake = resolve));
  };
  const nextChange = (signal: AbortSignal) => raceSignal(changed, signal, callEnded);
  return {
    async push(applied, signal) {
      while (items.length >= limit && failure === undefined) await nextChange(signal);
      if (failure !== undefined) throw failure.error;
      items.push(applied);
      notify();
    },
    async shift(signal) {
      for (;;) {
        if (items.length > 0) {
          const applied = items.shift()!;
          notify();
          return { applied };
        }
        if (failure !== undefined) throw failure.error;
        if (ended) return undefined;
        await nextChange(signal);
      }
    },
    end() {
      ended = true;
      notify();
    },
    fail(error) {
      failure ??= { error };
      notify();
    },
  };
}

/** The error the input pump and queue end with once the call is over (the client is gone by then). */
function callEnded(): ConnectError {
  return sandboxError("CANCELED", "the call ended");
}

type ExecEvent = MessageInitShape<typeof ExecResponseSchema>;
type LogsEvent = MessageInitShape<typeof StreamLogsResponseSchema>;
type InputAck = MessageInitShape<typeof SendInputResponseSchema>;

/** Stdin's state once one SendInput message was applied, for its answer. */
interface InputState {
  /**
   * Closed by this message or one read before it, or by the exit; not by a close read after it,
   * which may be applied first (a close does not wait for the writes before it).
   */
  closed: boolean;
}

async function applyInput(
  managed: ManagedProcess,
  input: SendInputRequest["input"],
  signal: AbortSignal,
): Promise<InputState> {
  const closedBefore = managed.isInputClosed;
  await withConnectErrors(async () => {
    switch (input.case) {
      case "data":
        await managed.writeReceived(input.value, signal);
        return;
      case "close":
        await managed.closeInput();
        return;
      case "resize":
        await managed.resize(input.value.cols, input.value.rows);
        return;
      case "signal":
        managed.signal(parseSignal(input.value));
        return;
      case "open":
        throw sandboxError("INVALID_ARGUMENT", "open may only be the first SendInput message", {
          metadata: { field: "open" },
        });
      default:
        throw sandboxError("INVALID_ARGUMENT", "empty SendInput message", { metadata: { field: "input" } });
    }
  });
  return { closed: closedBefore || input.case === "close" || managed.exit !== undefined };
}

/** KillProcess's grace period: the default for 0, never escalate for a negative value. */
function gracePeriod(requestedMs: number): number {
  if (requestedMs === 0) return defaultKillGracePeriodMs;
  return requestedMs < 0 ? -1 : requestedMs;
}
