import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { DurationSchema, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  OutputStream,
  ProcessStatus as ProtoStatus,
  type OutputChunkSchema,
  type OutputGapSchema,
  type ProcessExitedSchema,
  type ProcessInfoSchema,
  type ProcessSpec as ProtoSpec,
  type ResourceLimits as ProtoLimits,
  type ResourceUsageSchema,
} from "../../../gen/sandbox/v1/sandbox_pb.js";
import type {
  ManagedProcess,
  OutputChunk,
  OutputGap,
  ProcessExit,
  ProcessSpec,
  ProcessStatus,
  ResourceUsage,
} from "../../process/index.js";
import type { CommandLimitsRequest } from "../../shared/limits.js";
import { sandboxError } from "./errors.js";
import { processStatusFromProto, processStatusToProto } from "../../shared/process-status.js";
import { exitCauseToProto, killOriginToProto, startStageToProto } from "../../shared/exit-cause.js";

/** Converts a manager status to its protobuf enum value. */
export function toProtoStatus(status: ProcessStatus): ProtoStatus {
  return processStatusToProto(status);
}

/** Converts a protobuf status to the manager's; INVALID_ARGUMENT for unspecified or unknown values. */
export function fromProtoStatus(status: ProtoStatus): ProcessStatus {
  const known = processStatusFromProto(status);
  if (known === undefined) {
    throw sandboxError("INVALID_ARGUMENT", `invalid process status: ${status}`, { metadata: { field: "statuses" } });
  }
  return known;
}

/** Converts a request's ProcessSpec; INVALID_ARGUMENT when it is missing. */
export function fromProtoSpec(spec: ProtoSpec | undefined): ProcessSpec {
  if (spec === undefined) throw sandboxError("INVALID_ARGUMENT", "spec is required", { metadata: { field: "spec" } });
  return {
    command: spec.command,
    args: spec.args,
    env: spec.env,
    cwd: spec.cwd,
    timeoutMs: spec.timeoutMs,
    processId: spec.processId,
    sessionId: spec.sessionId,
    pty: spec.pty && { cols: spec.pty.cols, rows: spec.pty.rows, term: spec.pty.term },
    stdin: spec.stdin,
    stdinData: spec.stdinData.length > 0 ? spec.stdinData : undefined,
    autoCleanup: spec.autoCleanup,
    sudo: spec.sudo,
    retention: spec.retention && {
      headBytes: byteCount(spec.retention.headBytes),
      tailBytes: byteCount(spec.retention.tailBytes),
    },
    limits: spec.limits && fromProtoLimits(spec.limits),
  };
}

/** Converts a spec's ResourceLimits (64-bit memory as a number: any value past 2^53 is past every cap anyway). */
function fromProtoLimits(limits: ProtoLimits): CommandLimitsRequest {
  const request: CommandLimitsRequest = {};
  if (limits.memoryBytes !== undefined)
    request.memoryBytes =
      limits.memoryBytes > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(limits.memoryBytes);
  if (limits.cpuMillis !== undefined) request.cpuMillis = limits.cpuMillis;
  if (limits.cpuWeight !== undefined) request.cpuWeight = limits.cpuWeight;
  if (limits.maxTasks !== undefined) request.maxTasks = limits.maxTasks;
  return request;
}

/** Converts a usage reading; each figure the daemon could not read stays absent. */
export function toProtoUsage(usage: ResourceUsage): MessageInitShape<typeof ResourceUsageSchema> {
  const whole = (value: number | undefined) => (value === undefined ? undefined : BigInt(Math.round(value)));
  return {
    cpuUserUs: whole(usage.cpuUserUs),
    cpuSystemUs: whole(usage.cpuSystemUs),
    memoryPeakBytes: whole(usage.memoryPeakBytes),
    memoryCurrentBytes: whole(usage.memoryCurrentBytes),
    ioReadBytes: whole(usage.ioReadBytes),
    ioWriteBytes: whole(usage.ioWriteBytes),
    oomKills: usage.oomKills,
  };
}

/** A uint64 size as a number; one beyond what a number holds exactly is refused later, as above every limit. */
function byteCount(value: bigint | undefined): number | undefined {
  return value === undefined ? undefined : Number(value);
}

function timestamp(date: Date): Timestamp {
  return timestampFromDate(date);
}

/**
 * Converts an exit to a ProcessExited message; `dropped` is the output the record (or, for Exec's
 * `exited`, the stream) no longer has.
 */
export function toProtoExit(
  exit: ProcessExit,
  dropped: readonly OutputGap[],
): MessageInitShape<typeof ProcessExitedSchema> {
  const seconds = Math.floor(exit.durationMs / 1000);
  return {
    status: toProtoStatus(exit.status),
    exitCode: exit.exitCode ?? undefined,
    signal: exit.signal ?? "",
    timedOut: exit.timedOut,
    killed: exit.killed,
    startTime: timestamp(exit.startTime),
    endTime: timestamp(exit.endTime),
    duration: create(DurationSchema, {
      seconds: BigInt(seconds),
      nanos: Math.round((exit.durationMs - seconds * 1000) * 1e6),
    }),
    stdoutBytes: BigInt(exit.stdoutBytes),
    stderrBytes: BigInt(exit.stderrBytes),
    error: exit.error ?? "",
    cause: exitCauseToProto(exit.cause),
    causeDetail:
      exit.killOrigin === undefined && exit.startStage === undefined
        ? undefined
        : {
            killOrigin: exit.killOrigin === undefined ? undefined : killOriginToProto(exit.killOrigin),
            startStage: exit.startStage === undefined ? undefined : startStageToProto(exit.startStage),
            errno: exit.errno ?? "",
          },
    dropped: dropped.map(toProtoGap),
    usage: exit.usage && toProtoUsage(exit.usage),
  };
}

/**
 * Converts a process record to a ProcessInfo message; `liveUsage` reads a running process's usage
 * from its cgroups now (a few file reads: GetProcess does, a list of many does not).
 */
export function toProtoInfo(managed: ManagedProcess, liveUsage = false): MessageInitShape<typeof ProcessInfoSchema> {
  const usage = liveUsage && managed.exit === undefined ? managed.readUsage() : undefined;
  const { description, exit } = managed;
  return {
    processId: description.id,
    pid: managed.pid,
    command: description.command,
    args: [...description.args],
    status: toProtoStatus(managed.status),
    sessionId: description.sessionId,
    cwd: description.cwd,
    pty: description.pty,
    stdin: !managed.isInputClosed,
    startTime: timestamp(managed.startTime),
    exit: exit && toProtoExit(exit, managed.droppedOutput()),
    stdoutBytes: BigInt(managed.outputOffsets.stdout),
    stderrBytes: BigInt(managed.outputOffsets.stderr),
    autoCleanup: description.autoCleanup,
    retention: {
      headBytes: BigInt(managed.retention.headBytes),
      tailBytes: BigInt(managed.retention.tailBytes),
    },
    usage: usage && toProtoUsage(usage),
  };
}

/**
 * The record as Exec's `started` event shows it: as it was when spawned, running, with no exit and
 * no output yet, even when a fast command has already ended by the time the event is built (its end
 * comes as `exited`, after its output). A process that never started keeps its error status.
 */
export function toProtoStartedInfo(managed: ManagedProcess): MessageInitShape<typeof ProcessInfoSchema> {
  const info = toProtoInfo(managed);
  if (managed.pid === 0 || managed.exit === undefined) return info;
  return {
    ...info,
    status: ProtoStatus.RUNNING,
    exit: undefined,
    stdin: managed.description.acceptsInput,
    stdoutBytes: 0n,
    stderrBytes: 0n,
  };
}

/** Converts a manager stream name to the protobuf enum value. */
export function toProtoStream(stream: "stdout" | "stderr"): OutputStream {
  return stream === "stdout" ? OutputStream.STDOUT : OutputStream.STDERR;
}

/** Converts an output chunk. */
export function toProtoChunk(chunk: OutputChunk): MessageInitShape<typeof OutputChunkSchema> {
  return { stream: toProtoStream(chunk.stream), offset: BigInt(chunk.offset), data: chunk.data };
}

/** Converts an output gap. */
export function toProtoGap(gap: OutputGap): MessageInitShape<typeof OutputGapSchema> {
  return { stream: toProtoStream(gap.stream), offset: BigInt(gap.offset), missedBytes: BigInt(gap.missedBytes) };
}
