import { accessSync, constants as fsConstants, readdirSync, readFileSync } from "node:fs";
import { encodeHelperEnvironment, findExecHelper, loadNativeAddon } from "../native/index.js";
import {
  CgroupSetupError,
  CommandCgroup,
  type CommandLimits,
  PidsCgroup,
  ResourceCgroup,
  type ResourceLimits,
  type ResourceUsage,
} from "../cgroups/index.js";
import type { UserIdentity } from "../user.js";
import type { StartStage } from "../../shared/exit-cause.js";

/** Default most tasks (processes and threads) one command may have at once. */
export const defaultMaxTasksPerCommand = 1024;

/**
 * Default most tasks of all commands together: a quarter of the kernel's pid_max, at most 16384, so
 * commands can never take every pid of the machine (32768 here: 8192).
 */
export const defaultMaxTasksTotal = Math.min(16_384, Math.floor(readPidMax() / 4));

function readPidMax(): number {
  try {
    return Number(readFileSync("/proc/sys/kernel/pid_max", "utf8").trim()) || 32_768;
  } catch {
    return 32_768;
  }
}

/** How a fork bomb inside a command is capped, as detected by {@link Launcher.create}. */
export type ForkLimit =
  /** A cgroup per command with `pids.max`: exact, per command, works for root too. */
  | "cgroup-pids"
  /**
   * Without a pids cgroup, through the helper: a supervisor process per command traces the command's
   * forks and clones (ptrace) and kills a task past the cap as it is created; per command, root's too.
   * RLIMIT_NPROC, at the total, still bounds the uid. A traced command cannot be traced by anything
   * else (no `strace` or `gdb` inside it).
   */
  | "traced"
  /** RLIMIT_NPROC (set by the helper, or util-linux `prlimit`): counts every process of the command's uid together, and the kernel ignores it for root. */
  | "rlimit-nproc"
  /** Nothing available (or disabled). */
  | "none";

/** Options for {@link Launcher.create}. */
export interface LauncherOptions {
  /** Most tasks one command may have at once; 0 disables the cap. Default {@link defaultMaxTasksPerCommand}. */
  maxTasksPerCommand?: number;
  /**
   * Most tasks of all commands together (the daemon's cgroup's `pids.max`); 0 for no cap. Default
   * {@link defaultMaxTasksTotal}. Only with cgroups: RLIMIT_NPROC has no daemon-wide form.
   */
  maxTasksTotal?: number;
  /** Look for a cgroup pids controller; false forces the rlimit fallback. Default true. */
  cgroups?: boolean;
  /**
   * Without a pids cgroup, cap each command's tasks with a tracing supervisor (see {@link ForkLimit}
   * "traced") rather than RLIMIT_NPROC alone, which one command can exhaust for all of them. Default
   * true; needs the helper.
   */
  traceTasks?: boolean;
  /**
   * Memory and CPU of all commands together (see {@link ResourceCgroup}); false for none. Default:
   * the defaults of {@link ResourceLimits}, where a cgroup v1 memory or cpu hierarchy is writable.
   */
  resources?: ResourceLimits | false;
  /** Path of the native helper; null to run without it. Default: {@link findExecHelper}. */
  execHelper?: string | null;
  /**
   * Let the native addon's spawn join a command's cgroups (see `SpawnChildOptions.joinCgroups`)
   * rather than the helper or a shell wrapper, for a command on pipes that needs nothing else of
   * them: one exec instead of two. Default: where the addon can.
   */
  joinAtSpawn?: boolean;
}

/** What to launch: a command as the process manager resolved it. */
export interface LaunchRequest {
  /** Program, looked up in `env.PATH` when it has no slash. */
  file: string;
  /** Arguments, without the program name. */
  args: readonly string[];
  /** The command's complete environment. */
  env: Readonly<Record<string, string>>;
  /** Absolute, resolved working directory. */
  cwd: string;
  /** Whether the command runs in a PTY. */
  pty: boolean;
  /**
   * Whether `cwd` is a workspace root itself: no component of it is the client's to swap, so it
   * needs no check as it is entered.
   */
  cwdIsRoot: boolean;
  /**
   * The command's own limits, resolved (see `ProcessManager`): its memory and CPU in cgroups of its
   * own, and its tasks (default: the launcher's `maxTasksPerCommand`). Default: none of its own.
   */
  limits?: CommandLimits;
}

/** How to spawn one command: the program, arguments, environment and ids to pass to spawn. */
export interface LaunchPlan {
  file: string;
  args: string[];
  /** The environment to spawn with: the helper's encoding of the command's, or the command's own. */
  env: Record<string, string>;
  /** Working directory to spawn in; "" when the helper enters (and verifies) it. */
  cwd: string;
  /** The helper reports a failed start on fd 3 (see {@link parseHelperStatus}), a PTY command's too. */
  statusFd: boolean;
  /** `cgroup.procs` files the spawn joins before the exec (see `SpawnChildOptions.joinCgroups`). */
  joinCgroups?: readonly string[];
  /**
   * The command's own cgroups (memory, CPU, usage, tree kill), where the machine gives them; its
   * pids cgroup, where separate, is released with {@link release}.
   */
  cgroup?: CommandCgroup;
  /** What the command's tree has used so far, from {@link cgroup}; undefined without one. */
  readUsage?(live?: boolean): ResourceUsage | undefined;
  /** Kills every process of the command's tree through {@link cgroup}. */
  killTree?(): void;
  /** Releases what the plan holds (the command's cgroups, its tree killed) once the command's group has exited. */
  release(): Promise<void>;
  /**
   * Whether the kernel killed a task of the command for memory, read from the command's own memory
   * cgroup (its `memory.events` oom_kill count, v1's `memory.oom_control`) once its leader has
   * exited and before {@link release}. Absent, or undefined, where the command has no memory cgroup
   * of its own: the exit's cause then never says `out_of_memory`.
   */
  killedForMemory?(): boolean | undefined;
}

/** A plan that could not be made: the stage of the start it failed at, and the errno name where there is one. */
export class LaunchError extends Error {
  /** The stage of the start that failed. */
  readonly stage: StartStage;
  /** The errno name ("EACCES"), or undefined. */
  readonly code: string | undefined;

  constructor(stage: StartStage, message: string, cause?: unknown) {
    super(message, { cause });
    this.name = "LaunchError";
    this.stage = stage;
    this.code = (cause as NodeJS.ErrnoException | undefined)?.code;
  }
}

/**
 * Launcher turns a command into what to spawn so that it runs as the right user, with that user's
 * supplementary groups, in a working directory nobody swapped meanwhile, with its fork count capped,
 * and with no fd the daemon inherited. All of that is the job of the native helper
 * (`native/sandboxd-exec.c`, see {@link findExecHelper}), which execs the command in the end, so the
 * pid spawned is the command's pid and process group id:
 *
 *     sandboxd-exec --cgroup <cgroup.procs> --uid U --gid G --groups NAME --cwd DIR -- <program> <args...>
 *
 * A command that needs nothing of the helper but its cgroups (the daemon's user, a root as cwd, on
 * pipes) skips it: the native addon's spawn joins them before the exec (see
 * {@link LauncherOptions.joinAtSpawn}), one exec instead of two.
 *
 * The helper runs with an environment the daemon fixed; the client's variables reach only the
 * command, after the switch to its user. Without the helper (no C compiler at install) commands run
 * as the daemon's user only, joining their cgroup through a shell wrapper or capped by util-linux
 * `prlimit`, and a user switch is refused.
 */
export class Launcher {
  private constructor(
    private readonly maxTasks: number,
    private readonly cgroup: PidsCgroup | undefined,
    /** The commands' parent in the memory and cpu controllers, when writable. */
    readonly resources: ResourceCgroup | undefined,
    private readonly prlimit: string | undefined,
    /** The native helper's path, or undefined when it is not available. */
    readonly helper: string | undefined,
    /** Whether the daemon holds fds it inherited (see hasInheritedFds): every command then goes through the helper. */
    private readonly inheritedFds: boolean,
    /** Whether commands without a pids cgroup are capped by a tracing supervisor. */
    private readonly traceTasks: boolean,
    /** Most tasks of all commands together, as RLIMIT_NPROC of a traced command's uid. */
    private readonly tasksTotal: number,
    /** Whether the spawn itself joins a command's cgroups (see {@link LauncherOptions.joinAtSpawn}). */
    private readonly joinAtSpawn: boolean,
  ) {}

  /** Detects cgroups, the native helper and prlimit on this machine. */
  static create(options: LauncherOptions = {}): Launcher {
    const maxTasks = options.maxTasksPerCommand ?? defaultMaxTasksPerCommand;
    const helper = options.execHelper === null ? undefined : (options.execHelper ?? findExecHelper());
    const total = options.maxTasksTotal ?? defaultMaxTasksTotal;
    const capTasks = maxTasks > 0 && options.cgroups !== false;
    const resources =
      options.resources === false
        ? undefined
        : ResourceCgroup.detect(options.resources ?? {}, capTasks ? { maxTasksTotal: total } : undefined);
    // Where the commands' own cgroups cap tasks in the unified hierarchy, no pids cgroup is made apart.
    const cgroup =
      capTasks && !(resources?.capabilities.tasksLimit ?? false)
        ? PidsCgroup.detect(total, { v1Only: resources?.unified ?? false })
        : undefined;
    return new Launcher(
      maxTasks,
      cgroup,
      resources,
      findProgram("prlimit"),
      helper,
      hasInheritedFds(),
      options.traceTasks ?? true,
      total,
      options.joinAtSpawn ?? loadNativeAddon()?.spawnJoinsCgroups === true,
    );
  }

  /** How fork bombs are capped for a command run as `uid`. */
  forkLimit(uid: number = process.getuid?.() ?? 0): ForkLimit {
    if (this.maxTasks <= 0) return "none";
    if (this.cgroup !== undefined || this.resources?.capabilities.tasksLimit) return "cgroup-pids";
    if (this.helper !== undefined && this.traceTasks) return "traced";
    return (this.helper !== undefined || this.prlimit !== undefined) && uid !== 0 ? "rlimit-nproc" : "none";
  }

  /** Most tasks of all commands together, where a cgroup enforces it; undefined otherwise. */
  get maxTasksTotal(): number | undefined {
    return this.cgroup?.maxTasksTotal ?? (this.resources?.capabilities.tasksLimit ? this.tasksTotal : undefined);
  }

  /** Most tasks one command may have (its default, and the most it may ask for); 0 for no cap. */
  get maxTasksPerCommand(): number {
    return this.maxTasks;
  }

  /** Whether commands join cgroups (a pids cgroup each, or the commands' memory and cpu ones) as they start. */
  get usesCgroups(): boolean {
    return this.cgroup !== undefined || this.resources !== undefined;
  }

  /** Whether a user switch keeps supplementary groups (the helper present and the daemon root). */
  get initializesGroups(): boolean {
    return this.helper !== undefined && process.getuid?.() === 0;
  }

  /** Whether commands may run as a user other than the daemon's: only through the helper. */
  get canSwitchUser(): boolean {
    return this.helper !== undefined;
  }

  /**
   * Plans the spawn of a command as `identity` (the daemon's own user when undefined). Throws a
   * {@link LaunchError} when the command's cgroup cannot be created (stage `cgroup`), when a user
   * switch is asked for without the helper (`user`), or when its tasks cannot be capped (`limits`).
   */
  plan(request: LaunchRequest, identity: UserIdentity | undefined): LaunchPlan {
    const daemonUid = process.getuid?.() ?? 0;
    const switching = identity !== undefined && (identity.uid !== daemonUid || identity.gid !== process.getgid?.());
    const limit = this.forkLimit(identity?.uid ?? daemonUid);
    const maxTasks = request.limits?.maxTasks ?? this.maxTasks;
    let procsFile: string | undefined;
    let releasePids = async () => {};
    if (limit === "cgroup-pids" && this.cgroup !== undefined) {
      const cgroup = this.cgroup;
      let created: ReturnType<PidsCgroup["create"]>;
      try {
        created = cgroup.create(maxTasks);
      } catch (cause) {
        throw new LaunchError("cgroup", `could not create the command's cgroup: ${(cause as Error).message}`, cause);
      }
      procsFile = created.procsFile;
      releasePids = () => cgroup.remove(created.directory);
    }
    let own: CommandCgroup | undefined;
    if (this.resources !== undefined) {
      try {
        this.resources.ensure();
        own = CommandCgroup.create(this.resources.planCommand({ ...request.limits, maxTasks }));
      } catch (cause) {
        void releasePids();
        const stage = cause instanceof CgroupSetupError && cause.step === "limits" ? "limits" : "cgroup";
        throw new LaunchError(
          stage,
          stage === "limits"
            ? `could not set the command's limits: ${(cause as Error).message}`
            : `could not create the command's cgroups: ${(cause as Error).message}`,
          cause instanceof CgroupSetupError ? cause.cause : cause,
        );
      }
    }
    const cgroup = own;
    const release =
      cgroup === undefined ? releasePids : () => Promise.all([cgroup.remove(), releasePids()]).then(() => {});
    const procsFiles = [...(procsFile !== undefined ? [procsFile] : []), ...(cgroup?.procsFiles ?? [])];
    // The helper costs an exec. A command it has nothing to do for (same user, a root as cwd, no fd
    // inherited) starts without it: the addon's spawn joins its cgroups before the exec, or else a
    // shell command line joins them itself, first thing.
    const shellLine = request.file === "/bin/sh" && request.args.length === 2 && request.args[0] === "-c";
    const joinAtSpawn = this.joinAtSpawn && !request.pty && procsFiles.length > 0;
    const helperNeeded =
      switching ||
      !request.cwdIsRoot ||
      this.inheritedFds ||
      (procsFiles.length > 0 && !shellLine && !joinAtSpawn) ||
      // The helper sets RLIMIT_NPROC itself (prlimit, the way without it, costs an exec too).
      (limit === "rlimit-nproc" && this.helper !== undefined) ||
      limit === "traced";
    if (this.helper !== undefined && helperNeeded) {
      const options: string[] = [];
      for (const file of procsFiles) options.push("--cgroup", file);
      if (limit === "rlimit-nproc") options.push("--nproc", String(maxTasks));
      if (limit === "traced") {
        options.push("--trace-tasks", String(maxTasks));
        // The uid's total, where the kernel applies it (not to root): the supervisor caps each command.
        if (this.tasksTotal > 0 && (identity?.uid ?? daemonUid) !== 0) options.push("--nproc", String(this.tasksTotal));
      }
      if (switching) {
        options.push("--uid", String(identity.uid), "--gid", String(identity.gid));
        // A uid without a passwd entry has no groups to look up: the switch clears them.
        if (identity.name !== String(identity.uid)) options.push("--groups", identity.name);
        if (request.pty) options.push("--tty-owner");
      }
      options.push("--cwd", request.cwd);
      options.push("--status-fd", "3");
      return {
        file: this.helper,
        args: [...options, "--", request.file, ...request.args],
        env: encodeHelperEnvironment(request.env),
        cwd: "",
        statusFd: true,
        cgroup,
        ...cgroupProbe(cgroup),
        release,
      };
    }
    if (switching) {
      void release();
      throw new LaunchError(
        "user",
        "running commands as another user needs the sandboxd-exec helper, which was not built",
      );
    }
    let argv = [request.file, ...request.args];
    if (limit === "rlimit-nproc" && this.prlimit === undefined) {
      void release();
      throw new LaunchError(
        "limits",
        "no way to cap this command's tasks: neither the sandboxd-exec helper nor prlimit is here",
      );
    }
    if (limit === "rlimit-nproc") argv = [this.prlimit!, `--nproc=${maxTasks}:${maxTasks}`, "--", ...argv];
    if (joinAtSpawn) {
      // Joined by the spawn itself: the argv stays the command's own.
    } else if (procsFiles.length > 0 && shellLine && argv[0] === "/bin/sh") {
      // Joined on the command's own line, so error messages keep their line numbers: one shell, no wrapper.
      const joins = procsFiles.map((file) => `echo $$ > ${shellQuote(file)}`).join(" && ");
      argv = ["/bin/sh", "-c", `{ ${joins}; } || exit; ${request.args[1]}`];
    } else if (procsFiles.length > 0) {
      // Same user as the command: a wrapper shell with the client's environment gains nothing.
      const joins = procsFiles.map((file) => `echo $$ > ${shellQuote(file)}`).join(" && ");
      argv = ["/bin/sh", "-c", `${joins} && exec "$@"`, "sandboxd-join", ...argv];
    }
    return {
      file: argv[0],
      args: argv.slice(1),
      env: { ...request.env },
      cwd: request.cwd,
      statusFd: false,
      ...(joinAtSpawn ? { joinCgroups: procsFiles } : {}),
      cgroup,
      ...cgroupProbe(cgroup),
      release,
    };
  }

  /** Removes the daemon's cgroup directories, once every command has been released. */
  close(): void {
    this.cgroup?.close();
    this.resources?.close();
  }
}

/** What a plan tells of its command through the command's own cgroups: its usage, its kills for memory, its tree killed. */
function cgroupProbe(
  cgroup: CommandCgroup | undefined,
): Pick<LaunchPlan, "killedForMemory" | "readUsage" | "killTree"> {
  if (cgroup === undefined) return {};
  return {
    killedForMemory: () => {
      const kills = cgroup.readUsage().oomKills;
      return kills === undefined ? undefined : kills > 0;
    },
    readUsage: (live) => cgroup.readUsage(live),
    killTree: () => {
      cgroup.kill();
    },
  };
}

/** Quotes a string for a POSIX shell command line. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/**
 * Whether this process holds an fd above 2 that is not close-on-exec: one it inherited (Node opens
 * everything close-on-exec). Such an fd would reach every command spawned without the helper. The
 * daemon marks what it inherited close-on-exec at start (`keepInheritedFdsFromCommands`), so this
 * finds one only in a process embedding the server. An fd gone between the listing and the read
 * (the listing's own directory fd is one) is not held; when /proc cannot be read, every fd counts as
 * inherited.
 */
function hasInheritedFds(): boolean {
  let entries: string[];
  try {
    entries = readdirSync("/proc/self/fd");
  } catch {
    return true;
  }
  for (const entry of entries) {
    const fd = Number(entry);
    if (fd <= 2) continue;
    let info: string;
    try {
      info = readFileSync(`/proc/self/fdinfo/${fd}`, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
      return true;
    }
    const flags = /^flags:\s+(\d+)/m.exec(info)?.[1];
    // O_CLOEXEC is 02000000 (octal) in the flags fdinfo reports.
    if (flags === undefined || (parseInt(flags, 8) & 0o2000000) === 0) return true;
  }
  return false;
}

function findProgram(name: string): string | undefined {
  for (const dir of ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"]) {
    try {
      accessSync(`${dir}/${name}`, fsConstants.X_OK);
      return `${dir}/${name}`;
    } catch {
      // Try the next.
    }
  }
  return undefined;
}
