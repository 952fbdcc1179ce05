import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  SandboxService,
  type ExecRequest,
  type ExecResponseSchema,
  type SendInputRequest,
  type SendInputResponseSchema,
  type StreamLogsRequest,
  type StreamLogsResponseSchema,
} from "../../gen/sandbox/v1/sandbox_pb.js";
import { defaultKillGracePeriodMs, maxPtyDimension, parseSignal, type ManagedProcess, type ProcessManager } from "../process/index.js";
import { fromProtoSpec, fromProtoStatus, toProtoChunk, toProtoExit, toProtoGap, toProtoInfo, toProtoStartedInfo } from "./convert.js";
import { createCallSignal, throwIfShuttingDown } from "./call-signal.js";
import { withConnectErrors } from "./errors.js";
import { clientGoneKey, peerKey } from "./limits.js";
import type { ProcessAudit } from "./observe.js";

/** Dependencies of {@link createSandboxService}. */
export interface SandboxServiceOptions {
  /** Runs the processes. */
  manager: ProcessManager;
  /**
   * Aborted when the daemon shuts down: open streams then end with UNAVAILABLE instead of
   * waiting for processes that are about to be killed.
   */
  shutdownSignal?: AbortSignal;
  /** Milliseconds between SIGTERM and SIGKILL when an Exec call is cancelled. Default 1000. */
  cancelGracePeriodMs?: number;
  /** Told of every process started, with who asked. Default: nothing. */
  audit?: ProcessAudit;
}

/**
 * Creates the implementation of sandbox.v1.SandboxService on top of a process manager. It holds no
 * state of its own, so tests can build it without a network.
 */
export function createSandboxService(options: SandboxServiceOptions): ServiceImpl<typeof SandboxService> {
  const { manager } = options;
  const cancelGracePeriodMs = options.cancelGracePeriodMs ?? 1000;
  const lookup = (id: string): ManagedProcess =>
    withConnectErrors(() => {
      if (id === "") throw new ConnectError("process_id is required", Code.InvalidArgument);
      return manager.get(id);
    });

  return {
    async *exec(request: ExecRequest, context: HandlerContext) {
      const spec = fromProtoSpec(request.spec);
      const gone = context.values.get(clientGoneKey) ?? context.signal;
      const managed = await withConnectErrors(() => manager.start(spec, { pinnedReader: true, signal: gone }));
      options.audit?.started(managed, context.values.get(peerKey), manager.commandUser(spec.sudo ?? false));
      const call = createCallSignal(context.signal, options.shutdownSignal);
      // Cancelled while it started (a client that resets its calls at once): it must not run on.
      if (gone.aborted || context.signal.aborted) {
        call.dispose();
        managed.releasePinnedReader();
        managed.kill("SIGKILL", -1);
        throw new ConnectError("the call was cancelled", Code.Canceled);
      }
      const signal = call.signal;
      const stop = () => {
        call.dispose();
        managed.releasePinnedReader();
        if (managed.exit === undefined) managed.kill("SIGTERM", cancelGracePeriodMs);
      };
      // The generator may be parked on a `yield` whose write never completes (the caller stopped
      // reading and then cancelled), so its `finally` cannot be relied on to run promptly: stop the
      // command from the signal itself.
      signal.addEventListener("abort", stop, { once: true });
      try {
        yield { event: { case: "started", value: toProtoStartedInfo(managed) } } satisfies ExecEvent;
        for await (const item of managed.pinnedReader!.items({ follow: true, signal })) {
          // A pinned reader is never dropped from under, so only chunks come.
          if (item.kind === "chunk") yield { event: { case: "output", value: toProtoChunk(item) } } satisfies ExecEvent;
        }
        throwIfShuttingDown(options.shutdownSignal);
        if (signal.aborted) return;
        const exit = await managed.exited;
        yield { event: { case: "exited", value: toProtoExit(exit) } } satisfies ExecEvent;
        // The caller has every byte and the exit: the record stays, its output is not worth keeping.
        manager.dropOutput(managed);
      } finally {
        // Reached on completion, cancel, deadline, disconnect and shutdown alike.
        signal.removeEventListener("abort", stop);
        stop();
      }
    },

    async startProcess(request, context) {
      const spec = fromProtoSpec(request.spec);
      const managed = await withConnectErrors(() => manager.start(spec, { signal: context.values.get(clientGoneKey) ?? context.signal }));
      options.audit?.started(managed, context.values.get(peerKey), manager.commandUser(spec.sudo ?? false));
      return { process: toProtoInfo(managed) };
    },

    async *streamLogs(request: StreamLogsRequest, context: HandlerContext) {
      const managed = lookup(request.processId);
      const written = managed.output.offsets;
      const from = { stdout: Number(request.stdoutOffset), stderr: Number(request.stderrOffset) };
      for (const stream of ["stdout", "stderr"] as const) {
        const offset = stream === "stdout" ? request.stdoutOffset : request.stderrOffset;
        if (offset > BigInt(written[stream])) {
          throw new ConnectError(
            `${stream}_offset ${offset} is beyond the ${written[stream]} bytes written so far`,
            Code.OutOfRange,
          );
        }
      }
      const call = createCallSignal(context.signal, options.shutdownSignal);
      const signal = call.signal;
      try {
        yield { event: { case: "process", value: toProtoInfo(managed) } } satisfies LogsEvent;
        const reader = managed.output.createReader(from);
        for await (const item of reader.items({ follow: request.follow, signal })) {
          yield item.kind === "chunk"
            ? ({ event: { case: "output", value: toProtoChunk(item) } } satisfies LogsEvent)
            : ({ event: { case: "gap", value: toProtoGap(item) } } satisfies LogsEvent);
        }
        throwIfShuttingDown(options.shutdownSignal);
        if (signal.aborted) return;
        if (managed.output.isEnded) {
          const exit = await managed.exited;
          yield { event: { case: "exited", value: toProtoExit(exit) } } satisfies LogsEvent;
        } else {
          const { stdout, stderr } = reader.consumedOffsets;
          yield { event: { case: "caughtUp", value: { stdoutOffset: BigInt(stdout), stderrOffset: BigInt(stderr) } } } satisfies LogsEvent;
        }
      } finally {
        call.dispose();
      }
    },

    async *sendInput(requests: AsyncIterable<SendInputRequest>, context: HandlerContext) {
      const iterator = requests[Symbol.asyncIterator]();
      const first = await iterator.next();
      if (first.done) return;
      throwIfShuttingDown(options.shutdownSignal);
      if (first.value.input.case !== "open") {
        throw new ConnectError("the first SendInput message must be open", Code.InvalidArgument);
      }
      const managed = lookup(first.value.input.value.processId);
      if (!managed.stdin) {
        throw new ConnectError(`process ${managed.id} has no stdin: start it with stdin or pty`, Code.FailedPrecondition);
      }
      if (managed.exit !== undefined) {
        throw new ConnectError(`process has exited: ${managed.id}`, Code.FailedPrecondition);
      }
      yield { bytesWritten: BigInt(managed.bytesWritten), closed: managed.isInputClosed } satisfies InputAck;
      // Messages are read ahead of their answers, a bounded number at a time, by a pump of their own:
      // data, end-of-input and resizes are applied in order, but a signal is applied as it arrives,
      // never behind a write the process does not read. Answers stay in message order.
      const applied = createAppliedQueue(maxInputLookahead);
      const pump = (async () => {
        let inOrder: Promise<void> = Promise.resolve();
        try {
          for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
            throwIfShuttingDown(options.shutdownSignal);
            const input = next.value.input;
            let done: Promise<void>;
            if (input.case === "signal") {
              done = applyInput(managed, input, context.signal);
            } else {
              done = inOrder.then(() => applyInput(managed, input, context.signal));
              inOrder = done.catch(() => {});
            }
            done.catch(() => {});
            await applied.push(done, context.signal);
          }
          applied.end();
        } catch (error) {
          applied.fail(error);
        }
      })();
      try {
        for (;;) {
          const next = await applied.shift(context.signal);
          if (next === undefined) break;
          await next.applied;
          yield { bytesWritten: BigInt(managed.bytesWritten), closed: managed.isInputClosed } satisfies InputAck;
          if (context.signal.aborted) return;
        }
      } finally {
        applied.fail(new ConnectError("the call ended", Code.Canceled));
        // Not awaited: the pump may be waiting for a message the client will only send after an
        // answer this call no longer gives; it ends with the request stream.
        void pump.catch(() => {});
      }
    },

    async getProcess(request) {
      return { process: toProtoInfo(lookup(request.processId)) };
    },

    async listProcesses(request) {
      const statuses = request.statuses.map(fromProtoStatus);
      const processes = withConnectErrors(() => manager.list({ sessionId: request.sessionId, statuses }));
      return { processes: processes.map(toProtoInfo) };
    },

    async killProcess(request) {
      const managed = lookup(request.processId);
      const signal = withConnectErrors(() => parseSignal(request.signal));
      managed.kill(signal, gracePeriod(request.gracePeriodMs));
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
      return { removedCount: withConnectErrors(() => manager.cleanup({ sessionId: request.sessionId })) };
    },

    async getProcessLogs(request) {
      const managed = lookup(request.processId);
      return {
        processId: managed.id,
        stdout: managed.output.snapshot("stdout"),
        stderr: managed.output.snapshot("stderr"),
        stdoutOffset: BigInt(managed.output.retainedFrom.stdout),
        stderrOffset: BigInt(managed.output.retainedFrom.stderr),
        process: toProtoInfo(managed),
      };
    },
  };
}

/** Most SendInput messages read ahead of their answers. */
const maxInputLookahead = 64;

/** A queue of input messages being applied, in message order, holding at most `limit` unanswered. */
interface AppliedQueue {
  /** Adds one; waits while `limit` are unanswered. */
  push(applied: Promise<void>, signal: AbortSignal): Promise<void>;
  /** Takes the oldest (wrapped, so awaiting the take does not await the message); undefined once ended and empty. Rejects with the pump's failure. */
  shift(signal: AbortSignal): Promise<{ applied: Promise<void> } | undefined>;
  end(): void;
  fail(error: unknown): void;
}

function createAppliedQueue(limit: number): AppliedQueue {
  const items: Promise<void>[] = [];
  let ended = false;
  let failure: { error: unknown } | undefined;
  let wake: (() => void) | undefined;
  const changed = (signal: AbortSignal) =>
    new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(new ConnectError("the call ended", Code.Canceled));
      const onAbort = () => reject(new ConnectError("the call ended", Code.Canceled));
      signal.addEventListener("abort", onAbort, { once: true });
      wake = () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
    });
  const notify = () => {
    const waiting = wake;
    wake = undefined;
    waiting?.();
  };
  return {
    async push(applied, signal) {
      while (items.length >= limit && failure === undefined) await changed(signal);
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
        await changed(signal);
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

type ExecEvent = MessageInitShape<typeof ExecResponseSchema>;
type LogsEvent = MessageInitShape<typeof StreamLogsResponseSchema>;
type InputAck = MessageInitShape<typeof SendInputResponseSchema>;

async function applyInput(managed: ManagedProcess, input: SendInputRequest["input"], signal: AbortSignal): Promise<void> {
  await withConnectErrors(async () => {
    switch (input.case) {
      case "data":
        await managed.write(input.value, signal);
        return;
      case "close":
        await managed.closeInput();
        return;
      case "resize":
        if (input.value.cols === 0 || input.value.rows === 0 || input.value.cols > maxPtyDimension || input.value.rows > maxPtyDimension) {
          throw new ConnectError(`resize needs cols and rows between 1 and ${maxPtyDimension}`, Code.InvalidArgument);
        }
        managed.resize(input.value.cols, input.value.rows);
        return;
      case "signal":
        managed.signal(parseSignal(input.value));
        return;
      case "open":
        throw new ConnectError("open may only be the first SendInput message", Code.InvalidArgument);
      default:
        throw new ConnectError("empty SendInput message", Code.InvalidArgument);
    }
  });
}

/** KillProcess's grace period: the default for 0, never escalate for a negative value. */
function gracePeriod(requestedMs: number): number {
  if (requestedMs === 0) return defaultKillGracePeriodMs;
  return requestedMs < 0 ? -1 : Math.min(requestedMs, 2 ** 31 - 1);
}

