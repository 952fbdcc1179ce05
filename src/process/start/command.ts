import { realpathSync } from "node:fs";
import { identityEnvironment } from "./environment.js";
import type { ProcessDescription } from "../managed-process.js";
import type { UserIdentity } from "../user.js";
import type { RetentionRequest } from "../retention.js";
import {
  type CommandLimitsRequest,
  defaultPtyCols,
  defaultPtyRows,
  planStdin,
  type StdinPlan,
} from "../../shared/limits.js";
import { findProgramProblem } from "./program-lookup.js";
import { execSimpleCommand, plainCommandWords } from "./shell-line.js";

/** What to run and how: the process manager's view of a request. */
export interface ProcessSpec {
  /** A shell command line (run by `/bin/sh -c`) when `args` is empty; otherwise the program. */
  command: string;
  /** Program arguments; when non-empty, `command` runs directly with no shell. */
  args?: readonly string[];
  /**
   * Whether `command` is a shell command line: false runs it as a program even with no `args` (argv
   * as KEP-539.2's `ProcessConfig.command` gives it). Default: true when `args` is empty.
   */
  shell?: boolean;
  /** Variables added to the clean base environment. */
  env?: Readonly<Record<string, string>>;
  /** Working directory inside the workspace; the first root when empty. */
  cwd?: string;
  /** Time limit in milliseconds, 0 for none; SIGKILL of the group on expiry. */
  timeoutMs?: number;
  /** Client-chosen id; a UUID when empty. */
  processId?: string;
  /** Session for grouping. */
  sessionId?: string;
  /** Run in a pseudo-terminal of this size. */
  pty?: { cols?: number; rows?: number; term?: string };
  /** Keep a stdin pipe open for writes. */
  stdin?: boolean;
  /** Bytes written to stdin at start; stdin is then closed unless `stdin` is set. */
  stdinData?: Uint8Array;
  /** Remove the record a linger time after exit (default true). */
  autoCleanup?: boolean;
  /** Run as root; refused unless the manager allows it. */
  sudo?: boolean;
  /** How much of the output the record retains; the manager's defaults for what is unset. */
  retention?: RetentionRequest;
  /** Its own resource limits, within the daemon's caps; unset fields take the daemon's defaults. */
  limits?: CommandLimitsRequest;
}

/** What {@link resolveCommand} takes besides the spec: what the manager decided or knows. */
export interface CommandContext {
  /** The process id: the spec's, or a new UUID. */
  readonly id: string;
  /** The working directory, resolved inside the workspace. */
  readonly cwd: string;
  /** The user the command runs as (root with sudo); undefined for the daemon's own. */
  readonly identity: UserIdentity | undefined;
  /** The daemon's own user, whose HOME, USER and LOGNAME a command running as it gets. */
  readonly ownUser: UserIdentity;
  /** The clean base environment of every command. */
  readonly baseEnvironment: Readonly<Record<string, string>>;
}

/**
 * ResolvedCommand is a command resolved once from its spec, every default applied: the start derives
 * the record, the launch and the spawn from it, and reads nothing of the spec again.
 */
export interface ResolvedCommand {
  /** The record's fixed facts. */
  readonly description: ProcessDescription;
  /** What is executed: `/bin/sh` for a shell command line, else the program as given. */
  readonly file: string;
  /**
   * Its arguments, without the program name: `-c` and the line for a shell command line, prefixed
   * with `exec` when it is one simple command (see {@link execSimpleCommand}), so that a signal that
   * ends its program is reported as that signal, not as the shell's exit code 128+n.
   */
  readonly argv: readonly string[];
  /** Whether `file` is the shell running a command line (then no program lookup is made first). */
  readonly shell: boolean;
  /**
   * Whether `file` was already found where the command's PATH leads (a command line of plain words,
   * run without the shell): the start looks for it no second time.
   */
  readonly found: boolean;
  /** The complete environment: the base, the user's HOME, USER and LOGNAME, the spec's, and TERM for a PTY. */
  readonly env: Readonly<Record<string, string>>;
  /** The user it runs as; undefined for the daemon's own. */
  readonly identity: UserIdentity | undefined;
  /** The PTY's size with the defaults applied; undefined for pipes. */
  readonly pty: { readonly cols: number; readonly rows: number } | undefined;
  /** How its stdin is set up. */
  readonly stdin: StdinPlan;
  /** Bytes written to stdin at start; empty for none. */
  readonly stdinData: Uint8Array;
}

/** Resolves a validated spec into the one value a start works from (see {@link ResolvedCommand}). */
export function resolveCommand(spec: ProcessSpec, context: CommandContext): ResolvedCommand {
  const args = spec.args ?? [];
  const shell = spec.shell ?? args.length === 0;
  const env: Record<string, string> = {
    ...context.baseEnvironment,
    ...identityEnvironment(context.identity ?? context.ownUser),
    ...spec.env,
  };
  if (spec.pty !== undefined) env.TERM = spec.pty.term || env.TERM || "xterm-256color";
  const stdinData = spec.stdinData ?? new Uint8Array();
  const stdin = planStdin({ stdin: spec.stdin, stdinDataBytes: stdinData.length, pty: spec.pty !== undefined });
  const found = (program: string) => findProgramProblem(program, env.PATH ?? "", context.cwd) === undefined;
  // A line of plain words runs its program directly, as `sh -c` would run it: same words, same PATH
  // lookup, and the PWD the shell exports (its working directory, unless PWD already names it).
  const words = shell ? plainCommandWords(spec.command) : undefined;
  const direct = words !== undefined && found(words[0]!);
  if (direct) {
    // What the shell passes on: variables whose names it could not name itself are left out, as dash does.
    for (const name of Object.keys(env)) if (!shellVariableName.test(name)) delete env[name];
    env.PWD = shellWorkingDirectory(env.PWD, context.cwd);
  }
  return {
    description: {
      id: context.id,
      command: spec.command,
      args,
      cwd: context.cwd,
      sessionId: spec.sessionId ?? "",
      pty: spec.pty !== undefined,
      acceptsInput: stdin.acceptsInput,
      autoCleanup: spec.autoCleanup ?? true,
      timeoutMs: spec.timeoutMs ?? 0,
    },
    file: direct ? words[0]! : shell ? "/bin/sh" : spec.command,
    argv: direct ? words.slice(1) : shell ? ["-c", execSimpleCommand(spec.command, found)] : [...args],
    shell: shell && !direct,
    found: direct,
    env,
    identity: context.identity,
    pty:
      spec.pty === undefined
        ? undefined
        : { cols: spec.pty.cols || defaultPtyCols, rows: spec.pty.rows || defaultPtyRows },
    stdin,
    stdinData,
  };
}

/** A name the shell takes into its environment (dash drops the others it inherits). */
const shellVariableName = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The PWD `/bin/sh` exports for a command it runs in `cwd`: the inherited one when it is an absolute
 * path to that same directory, else `cwd` itself (dash's rule).
 */
function shellWorkingDirectory(inherited: string | undefined, cwd: string): string {
  if (inherited === undefined || !inherited.startsWith("/") || inherited === cwd) return cwd;
  try {
    return realpathSync(inherited) === cwd ? inherited : cwd;
  } catch {
    return cwd;
  }
}
