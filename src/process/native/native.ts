import { accessSync, constants as fsConstants, statSync } from "node:fs";
import path from "node:path";
import { findNativeFile, readable } from "./native-files.js";

/** The parent-side fds of a command started by {@link NativeAddon.spawn}. */
export interface NativeSpawned {
  pid: number;
  stdin?: number;
  stdout?: number;
  stderr?: number;
  status?: number;
  master?: number;
  slave?: number;
  ptyPath?: string;
}

/** What `native/addon.c` offers. */
export interface NativeAddon {
  spawn(
    file: string,
    argv: readonly string[],
    envp: readonly string[],
    options: { cwd?: string; stdin: boolean; statusFd: boolean; pty?: { cols: number; rows: number } },
  ): NativeSpawned;
  spawnAsync(
    file: string,
    argv: readonly string[],
    envp: readonly string[],
    options: {
      cwd?: string;
      stdin: boolean;
      statusFd: boolean;
      pty?: { cols: number; rows: number };
      /**
       * `cgroup.procs` files the child joins before it execs (pipes only): its first instruction
       * runs in them. A join that fails rejects with `syscall` "cgroup"; see {@link spawnJoinsCgroups}.
       */
      cgroups?: readonly string[];
    },
  ): Promise<NativeSpawned>;
  /** Whether the spawns take `options.cgroups`; absent on an addon built before they did, which would ignore it. */
  readonly spawnJoinsCgroups?: boolean;
  reap(pid: number): { code: number | null; signal: number | null } | undefined;
  /** A child that has exited and is not collected yet, without collecting it (waitid, WNOWAIT); 0 when none. */
  exitedChild(): number;
  resize(fd: number, cols: number, rows: number): void;
  trimMemory(): boolean;
  /** Tells V8 the process is low on memory (node::LowMemoryNotification): full collections that also shrink the young generation; false where Node does not export it. */
  lowMemory(): boolean;
  /**
   * Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): processes orphaned below it are
   * re-parented to it instead of init. Returns whether it already was one (or is PID 1); throws the
   * errno error.
   */
  becomeSubreaper(): boolean;
  /** Has the kernel send this process `signal` (a number) when its parent exits; returns the parent's pid now. */
  dieWithParent(signal: number): number;
  /** Makes this process non-dumpable: same-uid processes can no longer read its environ or memory. */
  hideFromSameUser(): void;
  /**
   * Marks every fd above 2 close-on-exec: an fd this process inherited stays open in it but reaches no
   * program it starts. Absent from an addon built before it (a checkout not rebuilt since).
   */
  keepInheritedFdsFromCommands?(): void;
  /** Replaces this process with `file argv` (execv: same pid and environment, stdio kept); returns only by throwing. */
  execProgram(file: string, argv: readonly string[]): never;
  /**
   * Creates a superblock of filesystem `type` with these flag options and mounts nothing (fsopen,
   * fsconfig): for cgroup2 this sets the hierarchy's options, kernel-wide. Throws the errno error.
   */
  configureFilesystem(type: string, flags: readonly string[]): void;
}

let addon: NativeAddon | null | undefined;

/**
 * Loads `build/sandboxd.node` (built at install; `SANDBOXD_NATIVE_ADDON` names another path), found
 * like the exec helper (see findNativeFile); null when it is missing, does not load, or `SANDBOXD_NO_ADDON=1` says not to, and the
 * daemon then does without: commands start through child_process (a fork of the daemon each),
 * terminal (PTY) commands are refused, and freed memory is not trimmed.
 */
export function loadNativeAddon(): NativeAddon | null {
  if (addon !== undefined) return addon;
  addon = null;
  if (process.env.SANDBOXD_NO_ADDON === "1") return addon;
  const file = findNativeFile("sandboxd.node", process.env.SANDBOXD_NATIVE_ADDON, readable);
  if (file === undefined) return addon;
  try {
    const module = { exports: {} as NativeAddon };
    process.dlopen(module, file);
    addon = module.exports;
  } catch {
    // Built for another Node or machine: do without.
  }
  return addon;
}

/**
 * The path posix_spawn needs for `file`: as it is with a slash (relative to `cwd`), else the first
 * executable file of that name in `searchPath` (the command's PATH, as execvp would search it), else
 * `file` itself, which then fails with ENOENT.
 */
export function executablePath(file: string, searchPath: string, cwd: string): string {
  if (file.includes("/")) return path.resolve(cwd || "/", file);
  for (const directory of searchPath.split(":")) {
    const candidate = path.resolve(cwd || "/", directory || ".", file);
    // stat first, without throwing: most PATH entries have no such file, and an error costs more than the call.
    try {
      if (!statSync(candidate, { throwIfNoEntry: false })?.isFile()) continue;
      accessSync(candidate, fsConstants.X_OK);
      return candidate;
    } catch {
      // Not a directory, or not executable: look further, as execvp does.
    }
  }
  return file;
}
