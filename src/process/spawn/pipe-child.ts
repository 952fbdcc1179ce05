import { spawn, type StdioOptions } from "node:child_process";
import net from "node:net";
import type { Readable, Writable } from "node:stream";
import {
  parseHelperStatus,
  startStageOfHelperStep,
  type HelperFailure,
  executablePath,
  loadNativeAddon,
  type NativeAddon,
  type NativeSpawned,
} from "../native/index.js";
import { listenForNativeExits, reapNow, spawnStarting, watchNativeExit } from "./native-exits.js";
import type { StartStage } from "../../shared/exit-cause.js";
import {
  outputDrainLimitMs,
  outputQuietMs,
  type ChildExit,
  type SpawnChildOptions,
  type SpawnedChild,
} from "./child.js";

/**
 * Spawns a child on pipes, in a new session and process group (`detached`). Resolves once the OS
 * gave it a pid and, with `statusFd`, once the helper exec'd the command; rejects with the spawn
 * error (ENOENT, EACCES) when it could not start, or a {@link HelperStartError} when the helper
 * reported a failed step.
 */
export function spawnPipeChild(options: SpawnChildOptions): Promise<SpawnedChild> {
  const native = loadNativeAddon();
  if (native !== null) return spawnWithAddon(native, options);
  if (options.joinCgroups !== undefined && options.joinCgroups.length > 0)
    return Promise.reject(new Error("joining cgroups at the spawn needs the native addon"));
  const stdio: StdioOptions = [options.stdin ? "pipe" : "ignore", "pipe", "pipe"];
  if (options.statusFd) stdio.push("pipe");
  const child = spawn(options.file, options.args as string[], {
    cwd: options.cwd || undefined,
    env: options.env,
    detached: true,
    stdio,
  });
  // Listened for at once: a command that exits fast is reaped before the helper's status fd reports.
  const leaderExited = new Promise<ChildExit>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
  });
  return new Promise<SpawnedChild>((resolve, reject) => {
    child.once("error", reject);
    child.once("spawn", () => {
      child.off("error", reject);
      // Errors after spawn (EPIPE on stdin, a kill of a gone process) must never crash the daemon.
      child.on("error", () => {});
      const io: PipeIo = { stdin: child.stdin, stdout: child.stdout as Readable, stderr: child.stderr as Readable };
      // Output is read from now on: Node discards what a child printed into streams nobody read yet
      // when it exits, and a fast command can exit before the helper's status arrives.
      const spawned = createPipeChild(child.pid!, io, leaderExited, options);
      awaitHelperStatus(child.stdio[3] as Readable | null | undefined, io).then(() => resolve(spawned), reject);
    });
  });
}

/**
 * Starts the child through the addon's posix_spawn (see `native/addon.c`): no fork of the daemon,
 * whatever its size. The same streams, exit and status as the child_process path.
 */
function spawnWithAddon(native: NativeAddon, options: SpawnChildOptions): Promise<SpawnedChild> {
  listenForNativeExits(native);
  const file = executablePath(options.file, options.env.PATH ?? "", options.cwd);
  const watched = spawnStarting();
  return native
    .spawnAsync(file, [options.file, ...options.args], environmentList(options.env), {
      cwd: options.cwd || undefined,
      stdin: options.stdin,
      statusFd: options.statusFd ?? false,
      ...(options.joinCgroups !== undefined && options.joinCgroups.length > 0 ? { cgroups: options.joinCgroups } : {}),
    })
    .then(
      (fds) => {
        const started = startedWithAddon(native, fds, options);
        watched();
        return started;
      },
      (error: unknown) => {
        watched();
        throw startStepError(error);
      },
    );
}

/**
 * The addon's error for a step of its own child before the exec (a cgroup it could not join, a cwd
 * it could not enter) as the helper reports the same steps; other errors as they are.
 */
function startStepError(error: unknown): unknown {
  const { syscall, code, message } = error as NodeJS.ErrnoException;
  const stage = syscall === "cgroup" ? "cgroup" : syscall === "chdir" ? "cwd" : undefined;
  if (stage === undefined) return error;
  return new HelperStartError({ stage, code: code ?? "EUNKNOWN", message });
}

function startedWithAddon(native: NativeAddon, fds: NativeSpawned, options: SpawnChildOptions): Promise<SpawnedChild> {
  const leaderExited = watchNativeExit(native, fds.pid);
  const io = {
    stdin: fds.stdin === undefined ? null : new net.Socket({ fd: fds.stdin, readable: false, writable: true }),
    stdout: new net.Socket({ fd: fds.stdout!, readable: true, writable: false }),
    stderr: new net.Socket({ fd: fds.stderr!, readable: true, writable: false }),
  };
  io.stdin?.on("error", () => {});
  io.stdout.on("error", () => {});
  io.stderr.on("error", () => {});
  const spawned = createPipeChild(fds.pid, io, leaderExited, options, () => reapNow(fds.pid));
  const status =
    fds.status === undefined ? undefined : new net.Socket({ fd: fds.status, readable: true, writable: false });
  return awaitHelperStatus(status, io).then(() => spawned);
}

/** `NAME=VALUE` strings of an environment. */
function environmentList(env: Readonly<Record<string, string>>): string[] {
  return Object.entries(env).map(([name, value]) => `${name}=${value}`);
}

/**
 * Resolves once the helper's status stream closes empty (it exec'd the command), or rejects with a
 * {@link HelperStartError} for what it wrote, after closing the child's streams. Resolves at once
 * without a status stream.
 */
function awaitHelperStatus(status: Readable | null | undefined, io: PipeIo): Promise<void> {
  if (status == null) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    let report = "";
    status.setEncoding("utf8");
    status.on("data", (text: string) => (report += text));
    status.on("error", () => {});
    status.once("close", () => {
      const failure = parseHelperStatus(report);
      if (failure === undefined) return resolve();
      io.stdout.destroy();
      io.stderr.destroy();
      io.stdin?.destroy();
      reject(new HelperStartError(failure));
    });
  });
}

/** The parent's ends of a child's pipes. */
interface PipeIo {
  stdin: Writable | null;
  stdout: Readable;
  stderr: Readable;
}

/** A start the native helper reported as failed, with the step and the errno name as `code`. */
export class HelperStartError extends Error {
  /** The errno name, as on Node's own spawn errors. */
  readonly code: string;
  /** The helper's step that failed ("setuid"). */
  readonly stage: string;
  /** The stage of the start that step belongs to ("user"). */
  readonly startStage: StartStage;

  constructor(failure: HelperFailure) {
    super(`${failure.stage}: ${failure.message}`);
    this.name = "HelperStartError";
    this.code = failure.code;
    this.stage = failure.stage;
    this.startStage = startStageOfHelperStep(failure.stage);
  }
}

function createPipeChild(
  pid: number,
  io: PipeIo,
  leaderExited: Promise<ChildExit>,
  options: SpawnChildOptions,
  hasExited?: () => boolean,
): SpawnedChild {
  const { stdout, stderr } = io;
  io.stdin?.on("error", () => {});
  let lastDataAt = Date.now();
  let paused = false;
  stdout.on("data", (data: Buffer) => {
    lastDataAt = Date.now();
    options.onOutput("stdout", data);
  });
  stderr.on("data", (data: Buffer) => {
    lastDataAt = Date.now();
    options.onOutput("stderr", data);
  });
  const streamClosed = (stream: Readable) =>
    new Promise<void>((resolve) => {
      if (stream.destroyed || stream.readableEnded) return resolve();
      // "end" comes once the last byte was delivered, a loop turn before "close" (the handle's close):
      // a turn that cost hundreds of milliseconds when a thousand processes exited at once.
      stream.once("end", resolve);
      stream.once("close", resolve);
    });
  const outputClosed = Promise.all([streamClosed(stdout), streamClosed(stderr)]);
  const finished = leaderExited.then(async (exit) => {
    // A grandchild may hold the pipes open forever: read what is there, then stop waiting.
    const exitedAt = Date.now();
    let waitedMs = 0;
    let closed = false;
    const closing = outputClosed.then(() => (closed = true));
    // Nearly always the pipes end with the exit or within a poll of it: one turn of the loop first,
    // and a timer only after that (one armed and cleared for every command showed in profiles).
    await Promise.race([closing, new Promise((resolve) => setImmediate(resolve))]);
    while (!closed) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([closing, new Promise((resolve) => (timer = setTimeout(resolve, 20)))]);
      clearTimeout(timer);
      if (closed) break;
      // After a busy spell the timer runs before the poll phase has read what is waiting in the
      // pipes: let one poll pass before judging the output quiet.
      await new Promise((resolve) => setImmediate(resolve));
      if (closed || paused) continue;
      waitedMs += 20;
      // Quiet counts from the exit at the earliest: a leader that printed nothing for a while before
      // exiting has not been quiet since its output was read.
      if (Date.now() - Math.max(lastDataAt, exitedAt) >= outputQuietMs || waitedMs >= outputDrainLimitMs) break;
    }
    stdout.destroy();
    stderr.destroy();
    io.stdin?.destroy();
    return exit;
  });

  return {
    pid,
    exited: leaderExited,
    finished,
    hasExited,
    write(data) {
      const stdin = io.stdin;
      if (stdin === null || stdin.destroyed || stdin.writableEnded) {
        return Promise.reject(new Error("stdin is closed"));
      }
      return new Promise<void>((resolve, reject) => {
        // Node reports a write cut short by destroy() (the drain after the exit) as a success.
        stdin.write(data, (error) =>
          error || stdin.destroyed
            ? reject(error ?? new Error("stdin was closed before the write completed"))
            : resolve(),
        );
      });
    },
    closeInput() {
      io.stdin?.end();
    },
    resize() {},
    pauseOutput() {
      paused = true;
      stdout.pause();
      stderr.pause();
    },
    resumeOutput() {
      paused = false;
      stdout.resume();
      stderr.resume();
    },
  };
}
