import { constants as osConstants } from "node:os";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  OutputStream,
  type OutputGap as ProtoGap,
  type ProcessStatus as ProtoStatus,
  type ProcessExited,
  type ProcessInfo,
  type ResourceUsage as ProtoUsage,
} from "../../../gen/sandbox/v1/sandbox_pb.js";
import type { OutputGap } from "./output.js";
import { processStatusFromProto, type ProcessStatus } from "../../shared/process-status.js";
import {
  exitCauseFromProto,
  killOriginFromProto,
  startStageFromProto,
  type ExitCause,
  type KillOrigin,
  type StartStage,
} from "../../shared/exit-cause.js";

/** Converts a protobuf status; `error` for an unspecified or unknown value. */
export function statusFromProto(status: ProtoStatus): ProcessStatus {
  return processStatusFromProto(status) ?? "error";
}

/** ProcessExit says how a process ended, as the daemon reported it. */
export interface ProcessExit {
  /** Final status: completed, failed, killed or error. */
  status: ProcessStatus;
  /**
   * The exit code. A process ended by a signal has no exit code of its own; it is reported as
   * 128 + the signal's number (137 for SIGKILL, 143 for SIGTERM), as a shell reports it, with
   * `signal` set. A program that was not found is 127.
   */
  exitCode: number;
  /** Name of the signal that ended it (`"SIGKILL"`), undefined when it exited on its own. */
  signal?: string;
  /** Whether it was killed because its timeout expired. */
  timedOut: boolean;
  /**
   * Whether a kill was requested (kill(), a cancelled call, the daemon shutting down). It says
   * nothing of how the process ended: one that caught SIGTERM and exited 0 has this set with
   * status `completed`; `signal` tells whether a signal ended it.
   */
  killRequested: boolean;
  /** When it started. */
  startTime: Date;
  /** When it ended. */
  endTime: Date;
  /** How long it ran, in milliseconds. */
  durationMs: number;
  /** Total bytes written to stdout. */
  stdoutBytes: number;
  /** Total bytes written to stderr. */
  stderrBytes: number;
  /** Why it could not start, for status error. */
  error?: string;
  /**
   * What its whole process tree used, read from its own cgroups as it ended; undefined where the
   * daemon has none to read (then every figure is unknown, never zero).
   */
  usage?: ResourceUsage;
  /**
   * Why it ended: `exited` (on its own, with `exitCode`), `signaled` (a signal from inside the
   * sandbox), `killed_on_request` (see `killOrigin`), `timed_out`, `out_of_memory` (the kernel, for
   * the command's own memory), `daemon_shutdown`, `start_failed` (see `startStage`, `errno`) or
   * `unknown` (the daemon lost track of it, or is older than this field).
   */
  cause: ExitCause;
  /** For `killed_on_request`: what asked for the kill (`kill_process`, `kill_all`, `cancel`, `disconnect`, `deadline`, `send_input`). */
  killOrigin?: KillOrigin;
  /** For `start_failed`: the step that failed (`cwd`, `user`, `exec`, `cgroup`, `limits`, `spawn`, `state`). */
  startStage?: StartStage;
  /** For `start_failed`: the errno name the step failed with (`"ENOENT"`), when it had one. */
  errno?: string;
  /**
   * Output the daemon's record dropped, at most one gap per stream (between the first bytes it keeps
   * and the last): what `getLogs()` and a later `attach()` cannot return. Empty from an Exec, which
   * hands its caller every byte.
   */
  dropped: readonly OutputGap[];
}

/**
 * ResourceUsage is what a command's whole process tree used, read by the daemon from the
 * command's own cgroups. A figure the daemon cannot tell on its machine is undefined: unknown, not
 * zero.
 */
export interface ResourceUsage {
  /** CPU time in user mode, in microseconds. */
  cpuUserUs?: number;
  /** CPU time in the kernel on its behalf, in microseconds. */
  cpuSystemUs?: number;
  /** The most memory it used at once, in bytes (page cache included). */
  memoryPeakBytes?: number;
  /** Memory in use now, in bytes (a running process's live reading only). */
  memoryCurrentBytes?: number;
  /** Bytes read from block devices. */
  ioReadBytes?: number;
  /** Bytes written to block devices. */
  ioWriteBytes?: number;
  /** How many of its processes the kernel killed for lack of memory. */
  oomKills?: number;
}

/** Converts a ResourceUsage message; absent figures stay undefined. */
export function usageFromProto(usage: ProtoUsage): ResourceUsage {
  const number = (value: bigint | undefined) => (value === undefined ? undefined : Number(value));
  const result: ResourceUsage = {};
  const set = <K extends keyof ResourceUsage>(key: K, value: number | undefined) => {
    if (value !== undefined) result[key] = value;
  };
  set("cpuUserUs", number(usage.cpuUserUs));
  set("cpuSystemUs", number(usage.cpuSystemUs));
  set("memoryPeakBytes", number(usage.memoryPeakBytes));
  set("memoryCurrentBytes", number(usage.memoryCurrentBytes));
  set("ioReadBytes", number(usage.ioReadBytes));
  set("ioWriteBytes", number(usage.ioWriteBytes));
  set("oomKills", usage.oomKills);
  return result;
}

/**
 * The exit code to report for an exit: the process's own, else 128 + the number of the signal that
 * ended it; undefined when the daemon gave neither (never invented).
 */
export function exitCodeOf(exited: Pick<ProcessExited, "exitCode" | "signal">): number | undefined {
  if (exited.exitCode !== undefined) return exited.exitCode;
  const number = (osConstants.signals as Record<string, number | undefined>)[exited.signal];
  return number === undefined ? undefined : 128 + number;
}

/** Converts a ProcessExited message; undefined when it carries no exit code and no known signal. */
export function exitFromProto(exited: ProcessExited): ProcessExit | undefined {
  const exitCode = exitCodeOf(exited);
  if (exitCode === undefined) return undefined;
  const startTime = exited.startTime ? timestampDate(exited.startTime) : new Date(0);
  const endTime = exited.endTime ? timestampDate(exited.endTime) : startTime;
  const duration = exited.duration;
  return {
    status: statusFromProto(exited.status),
    exitCode,
    signal: exited.signal || undefined,
    timedOut: exited.timedOut,
    killRequested: exited.killed,
    startTime,
    endTime,
    durationMs: duration
      ? Number(duration.seconds) * 1000 + duration.nanos / 1e6
      : endTime.getTime() - startTime.getTime(),
    stdoutBytes: Number(exited.stdoutBytes),
    stderrBytes: Number(exited.stderrBytes),
    error: exited.error || undefined,
    usage: exited.usage && usageFromProto(exited.usage),
    cause: exitCauseFromProto(exited.cause) ?? "unknown",
    killOrigin: exited.causeDetail && killOriginFromProto(exited.causeDetail.killOrigin),
    startStage: exited.causeDetail && startStageFromProto(exited.causeDetail.startStage),
    errno: exited.causeDetail?.errno || undefined,
    dropped: exited.dropped.map(gapFromProto),
  };
}

/** Converts an OutputGap message. */
export function gapFromProto(gap: ProtoGap): OutputGap {
  return {
    stream: gap.stream === OutputStream.STDERR ? "stderr" : "stdout",
    offset: Number(gap.offset),
    missedBytes: Number(gap.missedBytes),
  };
}

/** ProcessDetails is what the daemon's record says about a process when it was last seen. */
export interface ProcessDetails {
  /** The process id: client-chosen or a UUID. */
  id: string;
  /** Operating-system pid, also its process group id; undefined if never spawned. */
  pid?: number;
  /** The command as given. */
  command: string;
  /** The arguments (argv form); empty for a shell command line. */
  args: string[];
  /** Status when last seen. */
  status: ProcessStatus;
  /** Session id, if any. */
  sessionId?: string;
  /** Resolved working directory. */
  cwd: string;
  /** Whether it runs in a PTY. */
  pty: boolean;
  /** Whether its stdin is open for input now (started with `stdin: true` and not closed since). */
  stdinOpen: boolean;
  /** When it started. */
  startTime: Date;
  /** Whether the record is removed automatically after exit. */
  autoCleanup: boolean;
  /** How it ended; undefined while running. */
  exit?: ProcessExit;
  /** What it has used so far, read live (getProcess of a running process); its end's usage is in `exit`. */
  usage?: ResourceUsage;
  /**
   * How much of its output the daemon keeps, in bytes: the first `headBytes` of each stream and the
   * last `tailBytes` of both (undefined from a daemon that does not say).
   */
  retention?: { headBytes: number; tailBytes: number };
}

/** Converts a ProcessInfo message. */
export function detailsFromProto(info: ProcessInfo): ProcessDetails {
  return {
    id: info.processId,
    pid: info.pid === 0 ? undefined : info.pid,
    command: info.command,
    args: [...info.args],
    status: statusFromProto(info.status),
    sessionId: info.sessionId || undefined,
    cwd: info.cwd,
    pty: info.pty,
    stdinOpen: info.stdin,
    startTime: info.startTime ? timestampDate(info.startTime) : new Date(),
    autoCleanup: info.autoCleanup,
    exit: info.exit && exitFromProto(info.exit),
    usage: info.usage && usageFromProto(info.usage),
    retention: info.retention && {
      headBytes: Number(info.retention.headBytes ?? 0n),
      tailBytes: Number(info.retention.tailBytes ?? 0n),
    },
  };
}

/** The command line a process runs, for display: the command, then its arguments. */
export function commandLine(details: { readonly command: string; readonly args: readonly string[] }): string {
  return [details.command, ...details.args].join(" ");
}
