import path from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ProcessSpecSchema, ResourceLimitsSchema } from "../../../gen/sandbox/v1/sandbox_pb.js";
import { ptySizeProblem, stdinDataProblem, timeoutProblem } from "../../shared/limits.js";
import { SandboxError } from "./errors.js";
import type { OutputStreamName } from "./output.js";

/**
 * CommandOptions says how one command runs and how the client follows it. It is the one options
 * type of the command core: the APIs this client mirrors take it too, some fields renamed as those
 * APIs name them (see their option types).
 */
export interface CommandOptions {
  /**
   * Arguments: when given, the command is the program and runs without a shell (argv form);
   * otherwise the command is a shell command line run by `/bin/sh -c`.
   */
  args?: readonly string[];
  /**
   * Working directory: absolute, or relative to the sandbox's first workspace directory (the
   * daemon's first root when the sandbox names none). The daemon refuses one that resolves
   * (symlinks included) outside its workspace roots: PERMISSION_DENIED, reason CWD_OUTSIDE_WORKSPACE.
   */
  cwd?: string;
  /** Environment variables added to the daemon's clean base environment. */
  env?: Record<string, string>;
  /** Session for grouping, listing and killing; the sandbox's own session by default. */
  sessionId?: string;
  /**
   * Time limit in milliseconds: on expiry the daemon SIGKILLs the process group and the command
   * ends with `timedOut` and exit code 137. Waiting runs default to the sandbox's `timeoutMs`,
   * background ones to none; 0 means none.
   */
  timeoutMs?: number;
  /**
   * Run in a pseudo-terminal (`true` for 80×24, or a size). The kernel merges stderr into stdout
   * for a PTY, so everything arrives on stdout.
   */
  pty?: boolean | PtySize;
  /** Run as root. The daemon refuses with PERMISSION_DENIED (reason SUDO_NOT_ALLOWED) unless it allows it. */
  sudo?: boolean;
  /**
   * Resource limits of this command alone (its whole process tree), enforced by the daemon in
   * cgroups of the command's own; unset fields take the daemon's defaults. Above a daemon cap:
   * INVALID_ARGUMENT, reason LIMIT_ABOVE_CAP naming the cap; where the daemon cannot enforce one:
   * FAILED_PRECONDITION, LIMIT_NOT_ENFORCEABLE.
   */
  limits?: ResourceLimits;
  /** Text (as UTF-8) or bytes written to stdin at start; stdin is then closed unless `stdin` is true. */
  input?: string | Uint8Array;
  /**
   * Keep a stdin pipe open for `sendInput()` (after `input`, when both are given). Without it and
   * without `input` the command reads /dev/null and never waits for input.
   */
  stdin?: boolean;
  /** Client-chosen process id (a UUID when omitted); one of a live process is refused (PROCESS_ALREADY_EXISTS). */
  processId?: string;
  /** Remove the process's record once it has exited and lingered (default true). */
  autoCleanup?: boolean;
  /** Encoding of the text views of the output: any WHATWG label. Default `"utf-8"` (`"utf8"` works too). */
  encoding?: string;
  /**
   * Aborting kills the command: a waiting run's call is cancelled, so the daemon kills its process
   * group, and the run rejects with the signal's reason; a background command is sent SIGTERM
   * (SIGKILL a second later). The signal is let go of once the handle is done with the command.
   */
  signal?: AbortSignal;
  /**
   * Most output bytes (both streams together) the handle keeps for its result. Beyond it the oldest
   * chunks are dropped and the result says so (`truncated`, `droppedBytes`); iterators, `logs()`
   * and `onOutput` still see every byte as it arrives. Default: unlimited for a waiting run (the
   * result is the point), {@link DEFAULT_MAX_RETAINED_BYTES} for a background command, which may
   * print for days. 0 keeps nothing.
   */
  maxRetainedBytes?: number;
  /**
   * How much of the output the daemon keeps for `getLogs()` and later readers, in bytes: the first
   * `headBytes` of each stream and the last `tailBytes` of both, one gap between. Either left out
   * takes the daemon's default (a 64 KiB head, the tail the rest of its `--max-output-bytes`); more
   * than that cap in all is refused (INVALID_ARGUMENT, reason RETENTION_ABOVE_LIMIT).
   */
  retention?: { headBytes?: number; tailBytes?: number };
  /** Text the command printed, decoded incrementally per stream (never a split character). */
  onOutput?: (stream: OutputStreamName, data: string) => void;
  /** The command exited; `code` as in CommandFinished.exitCode. */
  onExit?: (code: number | null) => void;
  /** Following the command failed for good (a lasting connection failure, lost output). */
  onError?: (error: Error) => void;
}

/** ResourceLimits bounds what one command may use (see {@link CommandOptions.limits}). */
export interface ResourceLimits {
  /** Most memory of its processes together, in bytes; past it the kernel kills one of them. */
  memoryBytes?: number;
  /** CPU it may use, in CPUs (0.5 = half a CPU, 2 = two), as a quota: throttled past it, never killed. */
  cpus?: number;
  /** Its share of the CPU against other commands, 1 to 10000 (100 = every command's default). */
  cpuWeight?: number;
  /** Most tasks (processes and threads) at once; a fork past it fails. */
  maxTasks?: number;
}

/** Default {@link CommandOptions.maxRetainedBytes} of a background command: 16 MiB. */
export const DEFAULT_MAX_RETAINED_BYTES = 16 * 1024 * 1024;

/** Size and terminal type of a pseudo-terminal. */
export interface PtySize {
  /** Columns; 80 by default. */
  cols?: number;
  /** Rows; 24 by default. */
  rows?: number;
  /** TERM; `xterm-256color` by default. */
  term?: string;
}

/** What a sandbox adds to the commands it runs. */
export interface CommandDefaults {
  /** The sandbox's session id. */
  sessionId: string;
  /** Time limit of waiting runs, in milliseconds (0: none). */
  timeoutMs: number;
  /** Workspace directories; the first is the default working directory. */
  workspace: readonly string[];
  /** Encoding of text output, when the sandbox sets one. */
  encoding?: string;
}

/**
 * Builds the ProcessSpec of one command. `timeoutMs` must already hold the mode's default. A
 * value of the wrong shape, or out of the daemon's bounds (the process manager's own checks, in
 * src/shared/limits.ts), is refused with a SandboxError INVALID_ARGUMENT before any call.
 */
export function toProcessSpec(
  command: string,
  options: CommandOptions,
  defaults: CommandDefaults,
): MessageInitShape<typeof ProcessSpecSchema> {
  if (typeof command !== "string") throw invalid(`the command must be a string, not ${describe(command)}`);
  const args = options.args ?? [];
  if (!Array.isArray(args) || !args.every((arg) => typeof arg === "string"))
    throw invalid("args must be an array of strings");
  const timeoutMs = Math.ceil(options.timeoutMs ?? 0);
  check(timeoutProblem(timeoutMs));
  if (options.stdin !== undefined && typeof options.stdin !== "boolean") {
    throw invalid("stdin is true or false (keep a pipe open); text or bytes for stdin go in `input`");
  }
  const input = typeof options.input === "string" ? new TextEncoder().encode(options.input) : options.input;
  if (input !== undefined && !(input instanceof Uint8Array)) throw invalid("input must be text or bytes");
  check(stdinDataProblem(input?.length ?? 0));
  const pty = options.pty === true ? {} : options.pty === false ? undefined : options.pty;
  if (pty !== undefined) check(ptySizeProblem(pty.cols ?? 0, pty.rows ?? 0, "start"));
  return {
    command,
    args: [...args],
    env: options.env ?? {},
    cwd: workingDirectory(options.cwd, defaults.workspace),
    timeoutMs,
    processId: options.processId ?? "",
    sessionId: options.sessionId ?? defaults.sessionId,
    pty: pty && { cols: pty.cols ?? 0, rows: pty.rows ?? 0, term: pty.term ?? "" },
    stdin: options.stdin ?? false,
    stdinData: input ?? new Uint8Array(),
    autoCleanup: options.autoCleanup,
    sudo: options.sudo ?? false,
    limits: options.limits && toProtoLimits(options.limits),
    retention: options.retention && {
      headBytes: byteCount(options.retention.headBytes, "retention.headBytes"),
      tailBytes: byteCount(options.retention.tailBytes, "retention.tailBytes"),
    },
  };
}

/** A size in bytes for the wire; undefined stays unset. */
function byteCount(value: number | undefined, name: string): bigint | undefined {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || value < 0) throw invalid(`${name} must be a whole number of bytes`);
  return BigInt(value);
}

/**
 * The ResourceLimits message of a command's limits; a value of the wrong shape is refused with a
 * SandboxError INVALID_ARGUMENT before any call (the daemon checks its caps).
 */
function toProtoLimits(limits: ResourceLimits): MessageInitShape<typeof ResourceLimitsSchema> {
  if (typeof limits !== "object" || limits === null) throw invalid("limits must be an object");
  checkOptions(limits, resourceLimitNames, "limits");
  const whole = (name: string, value: number | undefined, least: number) => {
    if (value === undefined) return undefined;
    if (!Number.isSafeInteger(value) || value < least)
      throw invalid(`limits.${name} must be a whole number of at least ${least}, got ${value}`);
    return value;
  };
  const cpuMillis = limits.cpus === undefined ? undefined : Math.round(limits.cpus * 1000);
  if (limits.cpus !== undefined && (!Number.isFinite(limits.cpus) || limits.cpus <= 0))
    throw invalid(`limits.cpus must be a positive number of CPUs, got ${limits.cpus}`);
  const memoryBytes = whole("memoryBytes", limits.memoryBytes, 1);
  return {
    memoryBytes: memoryBytes === undefined ? undefined : BigInt(memoryBytes),
    cpuMillis: whole("cpus", cpuMillis, 1),
    cpuWeight: whole("cpuWeight", limits.cpuWeight, 1),
    maxTasks: whole("maxTasks", limits.maxTasks, 1),
  };
}

/** The field names of {@link ResourceLimits}. */
const resourceLimitNames = optionNames<ResourceLimits>({
  memoryBytes: true,
  cpus: true,
  cpuWeight: true,
  maxTasks: true,
});

/**
 * The working directory sent to the daemon: a relative one joined to the first workspace
 * directory, the first workspace directory when there is none. Confinement is the daemon's: it
 * resolves symlinks, which a client cannot do for paths on another machine.
 */
function workingDirectory(cwd: string | undefined, workspace: readonly string[]): string {
  if (workspace.length === 0 || (cwd !== undefined && path.posix.isAbsolute(cwd))) return cwd ?? "";
  return path.posix.join(workspace[0], cwd ?? ".");
}

/**
 * Refuses options that are not an object or that name a field `api` does not take, so a field
 * spelled as another API spells it (`timeout` for `timeoutMs`) is a SandboxError INVALID_ARGUMENT
 * instead of being ignored. `known` lists every field of the options type.
 */
export function checkOptions(options: unknown, known: Readonly<Record<string, true>>, api: string): void {
  if (options === undefined) return;
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw invalid(`${api}: options must be an object, not ${describe(options)}`);
  }
  const unknown = Object.keys(options).filter((key) => !Object.hasOwn(known, key));
  if (unknown.length > 0)
    throw invalid(`${api}: unknown option ${unknown.join(", ")} (it takes ${Object.keys(known).join(", ")})`);
}

/** Every field name of an options type `T`, checked by the compiler to be complete. */
export function optionNames<T>(names: { [K in keyof Required<T>]: true }): { readonly [K in keyof Required<T>]: true } {
  return names;
}

/** The field names of {@link CommandOptions}. */
export const commandOptionNames = optionNames<CommandOptions>({
  args: true,
  cwd: true,
  env: true,
  sessionId: true,
  timeoutMs: true,
  pty: true,
  sudo: true,
  limits: true,
  input: true,
  stdin: true,
  processId: true,
  autoCleanup: true,
  encoding: true,
  signal: true,
  maxRetainedBytes: true,
  retention: true,
  onOutput: true,
  onExit: true,
  onError: true,
});

/** Throws a limit's problem, when there is one, as INVALID_ARGUMENT. */
function check(problem: string | undefined): void {
  if (problem !== undefined) throw invalid(problem);
}

function invalid(message: string): SandboxError {
  return new SandboxError(message, "INVALID_ARGUMENT");
}

function describe(value: unknown): string {
  return Array.isArray(value) ? "an array" : value === null ? "null" : typeof value;
}
