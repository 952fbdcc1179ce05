import path from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ProcessSpecSchema } from "../../gen/sandbox/v1/sandbox_pb.js";
import { SandboxError } from "./errors.js";

/** Options every way of running a command takes (seed 000's BaseExecOptions). */
export interface BaseExecOptions {
  /** Session for grouping, listing and killing; the sandbox's own session by default. */
  sessionId?: string;
  /**
   * Time limit in milliseconds; on expiry the daemon SIGKILLs the process group and the command
   * ends with `timedOut: true` and exit code 137. Waiting calls (exec, execStream, blocking
   * runCommand) default to the sandbox's `timeout`; background processes to none. 0 means none.
   */
  timeout?: number;
  /** Environment variables added to the daemon's clean base environment. */
  env?: Record<string, string>;
  /** Working directory: relative to the sandbox's first workspace directory, or absolute inside one. */
  cwd?: string;
  /** Encoding of text output: any WHATWG label. Default `"utf-8"` (`"utf8"` works too). */
  encoding?: string;
}

/** How a command runs, beyond {@link BaseExecOptions}. */
export interface CommandOptions extends BaseExecOptions {
  /**
   * Arguments: when given, the command is the program and runs without a shell (argv form);
   * otherwise the command is a shell command line run by `/bin/sh -c`.
   */
  args?: readonly string[];
  /**
   * Run in a pseudo-terminal (`true` for 80×24, or a size). The kernel merges stderr into stdout
   * for a PTY, so everything arrives on stdout.
   */
  pty?: boolean | PtySize;
  /** Run as root. The daemon refuses with PERMISSION_DENIED unless it allows sudo. */
  sudo?: boolean;
}

/** Size and terminal type of a pseudo-terminal. */
export interface PtySize {
  /** Columns; 80 by default. */
  cols?: number;
  /** Rows; 24 by default. */
  rows?: number;
  /** TERM; `xterm-256color` by default. */
  term?: string;
}

/** What the sandbox adds to every command. */
export interface SpecDefaults {
  /** The sandbox's session id. */
  sessionId: string;
  /** Default time limit in milliseconds (0: none). */
  timeout: number;
  /** Allowed workspace directories; the first is the default working directory. */
  workspace: readonly string[];
}

/** What the spec of one command is made of. */
export interface SpecInput extends CommandOptions {
  /** Client-chosen process id. */
  processId?: string;
  /** Bytes (or UTF-8 text) written to stdin at start. */
  stdinData?: string | Uint8Array;
  /** Keep a stdin pipe open for SendInput. */
  stdinOpen?: boolean;
  /** Remove the record after exit and linger. */
  autoCleanup?: boolean;
}

/** Builds the ProcessSpec of one command from its options and the sandbox's defaults. */
export function buildSpec(command: string, input: SpecInput, defaults: SpecDefaults): MessageInitShape<typeof ProcessSpecSchema> {
  const timeout = input.timeout ?? defaults.timeout;
  if (!Number.isFinite(timeout) || timeout < 0) throw new SandboxError(`invalid timeout: ${timeout}`, "INVALID_ARGUMENT");
  const pty = input.pty === true ? {} : input.pty === false ? undefined : input.pty;
  return {
    command,
    args: input.args === undefined ? [] : [...input.args],
    env: input.env ?? {},
    cwd: resolveCwd(input.cwd, defaults.workspace),
    timeoutMs: Math.min(Math.ceil(timeout), 2 ** 31 - 1),
    processId: input.processId ?? "",
    sessionId: input.sessionId ?? defaults.sessionId,
    pty: pty && { cols: pty.cols ?? 0, rows: pty.rows ?? 0, term: pty.term ?? "" },
    stdin: input.stdinOpen ?? false,
    stdinData: typeof input.stdinData === "string" ? new TextEncoder().encode(input.stdinData) : (input.stdinData ?? new Uint8Array()),
    autoCleanup: input.autoCleanup,
    sudo: input.sudo ?? false,
  };
}

/**
 * Resolves a working directory against the workspace: relative paths from its first directory, and
 * an absolute path must lie inside one of them (INVALID_ARGUMENT otherwise). Without a workspace the
 * path goes to the daemon as given; the daemon confines it to its own roots either way.
 */
export function resolveCwd(cwd: string | undefined, workspace: readonly string[]): string {
  if (workspace.length === 0) return cwd ?? "";
  const resolved = path.resolve(workspace[0], cwd ?? ".");
  const inside = workspace.some((root) => {
    const relative = path.relative(path.resolve(root), resolved);
    return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
  });
  if (!inside) throw new SandboxError(`working directory ${resolved} is outside the sandbox's workspace`, "INVALID_ARGUMENT");
  return resolved;
}
