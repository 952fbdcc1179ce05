import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  OutputStream,
  ProcessExitedSchema,
  type SandboxService,
  type WaitForLogResponseSchema,
} from "../../../gen/sandbox/v1/sandbox_pb.js";
import {
  listListeningPorts,
  type LogMatch,
  type ManagedProcess,
  ProcessError,
  type ProcessManager,
  waitForExit,
  waitForLog,
  waitForPort,
} from "../../process/index.js";
import { toProtoExit, toProtoInfo, toProtoStream } from "./convert.js";
import { sandboxError, throwIfShuttingDown, toConnectError } from "./errors.js";

/** The readiness RPCs of sandbox.v1.SandboxService: WaitForPort, WaitForLog, WaitForExit and ListPorts. */
export type ReadinessHandlers = Pick<
  ServiceImpl<typeof SandboxService>,
  "waitForPort" | "waitForLog" | "waitForExit" | "listPorts"
>;

/**
 * Creates the readiness RPCs over a process manager: each wait runs in the daemon (the probes
 * connect from inside the sandbox), bounded by its `timeout_ms` and by the call, whose end (cancel,
 * deadline, disconnect, shutdown) stops it at once. A wait tied to a process that exits first fails
 * with PROCESS_EXITED carrying the exit record as a `sandbox.v1.ProcessExited` detail.
 */
export function createReadinessHandlers(options: {
  manager: ProcessManager;
  lookup: (id: string) => ManagedProcess;
}): ReadinessHandlers {
  const { manager, lookup } = options;
  return {
    async waitForPort(request, context) {
      const managed = request.processId === "" ? undefined : lookup(request.processId);
      const http = request.http && {
        path: request.http.path || "/",
        minStatus: request.http.minStatus || 200,
        maxStatus: request.http.maxStatus || Math.max(request.http.minStatus, 399),
      };
      const ready = await waiting(context, managed, () =>
        waitForPort({
          port: request.port,
          host: request.host,
          http,
          intervalMs: request.intervalMs,
          process: managed,
          timeoutMs: request.timeoutMs,
          signal: context.signal,
        }),
      );
      const seconds = Math.floor(ready.waitedMs / 1000);
      return {
        address: ready.address,
        httpStatus: ready.httpStatus,
        attempts: ready.attempts,
        waited: create(DurationSchema, {
          seconds: BigInt(seconds),
          nanos: Math.round((ready.waitedMs - seconds * 1000) * 1e6),
        }),
      };
    },

    async waitForLog(request, context) {
      const managed = lookup(request.processId);
      const streams =
        request.stream === OutputStream.STDOUT
          ? (["stdout"] as const)
          : request.stream === OutputStream.STDERR
            ? (["stderr"] as const)
            : (["stdout", "stderr"] as const);
      const found = await waiting(context, managed, () =>
        waitForLog(managed, {
          pattern: request.pattern,
          streams,
          from: { stdout: Number(request.stdoutOffset), stderr: Number(request.stderrOffset) },
          timeoutMs: request.timeoutMs,
          signal: context.signal,
        }),
      );
      return toProtoMatch(found);
    },

    async waitForExit(request, context) {
      const managed = lookup(request.processId);
      const exit = await waiting(context, managed, () =>
        waitForExit(managed, { timeoutMs: request.timeoutMs, signal: context.signal }),
      );
      return { exited: toProtoExit(exit, managed.droppedOutput()), process: toProtoInfo(managed) };
    },

    async listPorts(request) {
      const leaders = new Map<number, string>();
      for (const managed of manager.list({ statuses: ["running"] }))
        if (managed.pid > 0) leaders.set(managed.pid, managed.id);
      const only = request.processId === "" ? undefined : lookup(request.processId).id;
      const ports = await listListeningPorts(leaders).catch((error: unknown) => {
        throw toConnectError(error);
      });
      return { ports: ports.filter((port) => only === undefined || port.processId === only) };
    },
  };
}

/**
 * Runs a wait, turning its failures into ConnectErrors: the call's own end into CANCELED (or
 * UNAVAILABLE at shutdown), a ProcessError into its reason's code, PROCESS_EXITED with the exit
 * record as a `sandbox.v1.ProcessExited` detail beside the ErrorInfo.
 */
async function waiting<T>(
  context: HandlerContext,
  managed: ManagedProcess | undefined,
  wait: () => Promise<T>,
): Promise<T> {
  try {
    return await wait();
  } catch (error) {
    if (!(error instanceof ProcessError) && context.signal.aborted) {
      throwIfShuttingDown(context.signal);
      throw sandboxError("CANCELED", "the call ended before the wait did", { cause: error });
    }
    const failure = toConnectError(error);
    if (error instanceof ProcessError && error.reason === "PROCESS_EXITED" && managed?.exit !== undefined)
      failure.details.push({ desc: ProcessExitedSchema, value: toProtoExit(managed.exit, managed.droppedOutput()) });
    throw failure;
  }
}

function toProtoMatch(found: LogMatch): MessageInitShape<typeof WaitForLogResponseSchema> {
  return {
    stream: toProtoStream(found.stream),
    offset: BigInt(found.offset),
    line: found.line,
    lineOffset: BigInt(found.lineOffset),
    match: found.match,
    groups: found.groups.map((text) => ({ text })),
    namedGroups: { ...found.namedGroups },
  };
}
