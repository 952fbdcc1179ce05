import { accessSync, constants as fsConstants } from "node:fs";
import { PidsCgroup } from "./pids-cgroup.js";
import type { UserIdentity } from "./user.js";

/** Default most tasks (processes and threads) one command may have at once. */
export const defaultMaxTasksPerCommand = 1024;

/** How a fork bomb inside a command is capped, as detected by {@link Launcher.create}. */
export type ForkLimit =
  /** A cgroup per command with `pids.max`: exact, per command, works for root too. */
  | "cgroup-pids"
  /** RLIMIT_NPROC through util-linux `prlimit`: counts every process of the command's uid, and the kernel ignores it for root. */
  | "rlimit-nproc"
  /** Nothing available (or disabled). */
  | "none";

/** Options for {@link Launcher.create}. */
export interface LauncherOptions {
  /** Most tasks one command may have at once; 0 disables the cap. Default {@link defaultMaxTasksPerCommand}. */
  maxTasksPerCommand?: number;
  /** Look for a cgroup pids controller; false forces the prlimit fallback. Default true. */
  cgroups?: boolean;
}

/** How to spawn one command: the program and arguments to run, and the ids to pass to spawn. */
export interface LaunchPlan {
  file: string;
  args: string[];
  uid?: number;
  gid?: number;
  /** Releases what the plan holds (the command's cgroup) once the command's group has exited. */
  release(): Promise<void>;
}

/**
 * Launcher turns a command into what to spawn so that it runs as the right user, with that user's
 * supplementary groups, and with its fork count capped. Every step `exec`s the next, so the pid
 * spawned is the command's pid (and process group id) in the end:
 *
 *     /bin/sh -c 'echo $$ > cgroup.procs && exec "$@"'   join the command's pids cgroup
 *     prlimit --nproc=N:N --                             when no cgroup is available
 *     setpriv --reuid U --regid G --init-groups --       when switching user as root
 *     <program> <args...>
 *
 * A shell command line spawned as it is (no setpriv in front) needs no wrapper: its shell joins the cgroup as
 * the first thing it does (`echo $$ > cgroup.procs || exit; <command line>`), saving an exec.
 *
 * Node's spawn sets only uid and gid (and drops supplementary groups); `setpriv` from util-linux
 * gives initgroups(3) semantics. Without setpriv the user switch falls back to spawn's uid and gid,
 * without supplementary groups.
 */
export class Launcher {
  private constructor(
    private readonly maxTasks: number,
    private readonly cgroup: PidsCgroup | undefined,
    private readonly prlimit: string | undefined,
    private readonly setpriv: string | undefined,
  ) {}

  /** Detects cgroups, prlimit and setpriv on this machine. */
  static create(options: LauncherOptions = {}): Launcher {
    const maxTasks = options.maxTasksPerCommand ?? defaultMaxTasksPerCommand;
    const cgroup = maxTasks > 0 && options.cgroups !== false ? PidsCgroup.detect() : undefined;
    return new Launcher(maxTasks, cgroup, findProgram("prlimit"), findProgram("setpriv"));
  }

  /** How fork bombs are capped for a command run as `uid`. */
  forkLimit(uid: number = process.getuid?.() ?? 0): ForkLimit {
    if (this.maxTasks <= 0) return "none";
    if (this.cgroup !== undefined) return "cgroup-pids";
    return this.prlimit !== undefined && uid !== 0 ? "rlimit-nproc" : "none";
  }

  /** Whether a user switch keeps supplementary groups (setpriv present and the daemon root). */
  get initializesGroups(): boolean {
    return this.setpriv !== undefined && process.getuid?.() === 0;
  }

  /**
   * Plans the spawn of `file args` as `identity` (the daemon's own user when undefined). Throws when
   * the command's cgroup cannot be created.
   */
  plan(file: string, args: readonly string[], identity: UserIdentity | undefined): LaunchPlan {
    let argv = [file, ...args];
    let uid: number | undefined;
    let gid: number | undefined;
    const daemonUid = process.getuid?.() ?? 0;
    const switching = identity !== undefined && (identity.uid !== daemonUid || identity.gid !== process.getgid?.());
    if (switching && this.initializesGroups) {
      const groups = identity.name === String(identity.uid) ? ["--clear-groups"] : ["--init-groups"];
      argv = [this.setpriv!, `--reuid=${identity.uid}`, `--regid=${identity.gid}`, ...groups, "--", ...argv];
    } else if (switching) {
      uid = identity.uid;
      gid = identity.gid;
    }
    const limit = this.forkLimit(identity?.uid ?? daemonUid);
    if (limit === "rlimit-nproc") argv = [this.prlimit!, `--nproc=${this.maxTasks}:${this.maxTasks}`, "--", ...argv];
    let release = async () => {};
    if (limit === "cgroup-pids") {
      const cgroup = this.cgroup!;
      const { directory, procsFile } = cgroup.create(this.maxTasks);
      argv =
        argv.length === 3 && argv[0] === "/bin/sh" && argv[1] === "-c"
          ? // A shell command line joins its cgroup itself, before any of it runs, on the same line so
            // error messages keep their line numbers: one shell instead of a wrapper shell exec'ing a
            // second one, which saved about a millisecond per command (issue 5).
            ["/bin/sh", "-c", `echo $$ > ${shellQuote(procsFile)} || exit; ${argv[2]}`]
          : ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procsFile, ...argv];
      release = () => cgroup.remove(directory);
    }
    return { file: argv[0], args: argv.slice(1), uid, gid, release };
  }

  /** Removes the daemon's cgroup directory, once every command has been released. */
  close(): void {
    this.cgroup?.close();
  }
}

/** Quotes a string for a POSIX shell command line. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
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
