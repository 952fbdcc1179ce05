/**
 * The bounds of what a request may ask of the process manager, and the rules of a command's stdin,
 * in one place: the manager enforces them, the RPC layer reuses them, and a client may check them
 * before it sends anything. The checks return the problem as a sentence (or undefined when there is
 * none) so each caller throws its own error type.
 *
 * This module imports nothing, so a client loads it without loading the process manager (no native
 * addon).
 */

/** Longest process id and session id, in characters. */
export const maxIdLength = 256;
/** Longest command, argument or environment entry (`NAME=VALUE`), in UTF-8 bytes: Linux's MAX_ARG_STRLEN. */
export const maxArgumentBytes = 128 * 1024;
/** Most arguments of an argv-form command. */
export const maxArgumentCount = 4096;
/** Most environment variables a request may set. */
export const maxEnvironmentCount = 4096;
/** Most bytes of command, arguments and environment together (half of Linux's usual ARG_MAX). */
export const maxCommandLineBytes = 1024 * 1024;
/** Longest working directory, in UTF-8 bytes: PATH_MAX. */
export const maxPathBytes = 4096;
/** Longest TERM of a PTY command, in characters. */
export const maxTermLength = 64;
/** Largest PTY width and height, in cells. */
export const maxPtyDimension = 10_000;
/** PTY width, in columns, of a command that asks for a PTY without a size. */
export const defaultPtyCols = 80;
/** PTY height, in rows, of a command that asks for a PTY without a size. */
export const defaultPtyRows = 24;
/** Longest timeout, in milliseconds: what a Node timer can wait (2^31 - 1, also the largest protobuf int32). */
export const maxTimeoutMs = 2 ** 31 - 1;
/** Most stdin bytes a process may have pending (accepted, not yet handed to the OS), `stdin_data` included: 8 MiB. */
export const maxPendingInputBytes = 8 * 1024 * 1024;

/**
 * Why a PTY size cannot be used, or undefined when it can. Each side is at most
 * {@link maxPtyDimension}; a start may leave a side 0 (the default, {@link defaultPtyCols} by
 * {@link defaultPtyRows}), a resize may not.
 */
export function ptySizeProblem(cols: number, rows: number, use: "start" | "resize"): string | undefined {
  const least = use === "start" ? 0 : 1;
  const valid = (side: number) => Number.isInteger(side) && side >= least && side <= maxPtyDimension;
  if (valid(cols) && valid(rows)) return undefined;
  return use === "start"
    ? `pty size must be at most ${maxPtyDimension} columns and rows`
    : `resize needs cols and rows between 1 and ${maxPtyDimension}, got ${cols}x${rows}`;
}

/** Why a timeout in milliseconds cannot be used, or undefined when it can: 0 (none) to {@link maxTimeoutMs}. */
export function timeoutProblem(timeoutMs: number): string | undefined {
  if (!Number.isInteger(timeoutMs) || timeoutMs < 0)
    return `timeout must be a non-negative number of milliseconds, got ${timeoutMs}`;
  if (timeoutMs > maxTimeoutMs) return `timeout must be at most ${maxTimeoutMs} ms, got ${timeoutMs}`;
  return undefined;
}

/** What a command asks of its stdin (the `stdin`, `stdin_data` and `pty` fields of a spec). */
export interface StdinRequest {
  /** Keep a stdin open for input after start (`stdin`). */
  stdin?: boolean;
  /** Bytes written to stdin at start (`stdin_data`). */
  stdinDataBytes?: number;
  /** Run in a PTY, whose input is always open. */
  pty?: boolean;
}

/** How a command's stdin is set up: see {@link planStdin}. */
export interface StdinPlan {
  /**
   * The process reads a pipe (or its PTY) the daemon writes to, rather than /dev/null: input may be
   * written to it until it is closed.
   */
  readonly acceptsInput: boolean;
  /** Stdin is closed once `stdin_data` is written: it was asked for without `stdin`. */
  readonly closeAfterData: boolean;
}

/**
 * The rules of a command's stdin. Without `stdin`, `stdin_data` or a PTY it reads /dev/null and never
 * waits for input. `stdin_data` is written at start, then stdin is closed unless `stdin` keeps it
 * open. A PTY always accepts input (its end-of-input is ^D).
 */
export function planStdin(request: StdinRequest): StdinPlan {
  const data = (request.stdinDataBytes ?? 0) > 0;
  const stdin = request.stdin ?? false;
  const pty = request.pty ?? false;
  return { acceptsInput: stdin || data || pty, closeAfterData: data && !stdin };
}

/** Why `stdin_data` of this many bytes cannot be used, or undefined: at most {@link maxPendingInputBytes}. */
export function stdinDataProblem(bytes: number): string | undefined {
  if (bytes <= maxPendingInputBytes) return undefined;
  return `stdin_data is larger than the ${maxPendingInputBytes} bytes a process may have pending on stdin`;
}

/** A command's own resource limits as a request gives them (the `limits` of a spec); undefined fields take the daemon's defaults. */
export interface CommandLimitsRequest {
  /** Most memory of its tree, in bytes. */
  memoryBytes?: number;
  /** CPU quota in thousandths of one CPU. */
  cpuMillis?: number;
  /** CPU weight against other commands, 1 to 10000 (100 the default). */
  cpuWeight?: number;
  /** Most tasks of its tree at once. */
  maxTasks?: number;
}

/** The daemon's caps on one command's limits; an undefined cap is no cap. */
export interface CommandLimitCaps {
  /** Most memory a command may ask for, in bytes (`--max-command-memory-bytes`). */
  memoryBytes?: number;
  /** Most CPU a command may ask for, in thousandths of one CPU (`--max-command-cpus` x 1000). */
  cpuMillis?: number;
  /** Most tasks a command may ask for (`--max-tasks`). */
  maxTasks?: number;
}

/** Least memory limit a command may ask for: 1 MiB (less would not start a shell). */
export const minCommandMemoryBytes = 1024 * 1024;
/** Least CPU quota a command may ask for, in thousandths of one CPU: the kernel's 1 ms per 100 ms period. */
export const minCommandCpuMillis = 10;
/** Largest CPU weight (cgroup v2's). */
export const maxCpuWeight = 10_000;

/**
 * Why a command's limits cannot be used, or undefined when they can: `field` names the spec field
 * (`limits.memory_bytes`), and `cap` the daemon flag whose value it exceeds (undefined for a value
 * below the least allowed or not a whole number).
 */
export function commandLimitsProblem(
  limits: CommandLimitsRequest,
  caps: CommandLimitCaps,
): { field: string; message: string; cap?: { name: string; max: number; value: number } } | undefined {
  const check = (
    field: string,
    value: number | undefined,
    least: number,
    most: number | undefined,
    capName: string | undefined,
    unit: string,
  ) => {
    if (value === undefined) return undefined;
    if (!Number.isSafeInteger(value) || value < least)
      return { field, message: `${field} must be a whole number of at least ${least} ${unit}, got ${value}` };
    if (most !== undefined && value > most) {
      const message =
        capName === undefined
          ? `${field} must be at most ${most} ${unit}, got ${value}`
          : `${field} of ${value} ${unit} is above the daemon's cap of ${most} (${capName})`;
      return { field, message, ...(capName === undefined ? {} : { cap: { name: capName, max: most, value } }) };
    }
    return undefined;
  };
  return (
    check(
      "limits.memory_bytes",
      limits.memoryBytes,
      minCommandMemoryBytes,
      caps.memoryBytes,
      "max-command-memory-bytes",
      "bytes",
    ) ??
    check(
      "limits.cpu_millis",
      limits.cpuMillis,
      minCommandCpuMillis,
      caps.cpuMillis,
      "max-command-cpus",
      "thousandths of a CPU",
    ) ??
    check("limits.cpu_weight", limits.cpuWeight, 1, maxCpuWeight, undefined, "") ??
    check("limits.max_tasks", limits.maxTasks, 1, caps.maxTasks, "max-tasks", "tasks")
  );
}
