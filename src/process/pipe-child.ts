import { spawn, type StdioOptions } from "node:child_process";
import type { Readable } from "node:stream";
import { parseHelperStatus, type HelperFailure } from "./exec-helper.js";
import { outputDrainLimitMs, outputQuietMs, type ChildExit, type SpawnChildOptions, type SpawnedChild } from "./child.js";

/**
 * Spawns a child on pipes, in a new session and process group (`detached`). Resolves once the OS
 * gave it a pid and, with `statusFd`, once the helper exec'd the command; rejects with the spawn
 * error (ENOENT, EACCES) when it could not start, or a {@link HelperStartError} when the helper
 * reported a failed step.
 */
export function spawnPipeChild(options: SpawnChildOptions): Promise<SpawnedChild> {
  const stdio: StdioOptions = [options.stdin ? "pipe" : "ignore", "pipe", "pipe"];
  if (options.statusFd) stdio.push("pipe");
  const child = spawn(options.file, options.args as string[], {
    cwd: options.cwd || undefined,
    env: options.env,
    detached: true,
    stdio,
    uid: options.uid,
    gid: options.gid,
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
      child.stdin?.on("error", () => {});
      // Output is read from now on: Node discards what a child printed into streams nobody read yet
      // when it exits, and a fast command can exit before the helper's status arrives.
      const spawned = createPipeChild(child.pid!, child, leaderExited, options);
      const status = child.stdio[3] as Readable | null | undefined;
      if (status == null) return resolve(spawned);
      // The helper closes fd 3 by exec'ing the command, or writes why it could not first.
      let report = "";
      status.setEncoding("utf8");
      status.on("data", (text: string) => (report += text));
      status.on("error", () => {});
      status.once("close", () => {
        const failure = parseHelperStatus(report);
        if (failure === undefined) return resolve(spawned);
        child.stdout?.destroy();
        child.stderr?.destroy();
        child.stdin?.destroy();
        reject(new HelperStartError(failure));
      });
    });
  });
}

/** A start the native helper reported as failed, with the step and the errno name as `code`. */
export class HelperStartError extends Error {
  /** The errno name, as on Node's own spawn errors. */
  readonly code: string;
  /** The helper's step that failed. */
  readonly stage: string;

  constructor(failure: HelperFailure) {
    super(`${failure.stage}: ${failure.message}`);
    this.name = "HelperStartError";
    this.code = failure.code;
    this.stage = failure.stage;
  }
}

function createPipeChild(
  pid: number,
  child: import("node:child_process").ChildProcess,
  leaderExited: Promise<ChildExit>,
  options: SpawnChildOptions,
): SpawnedChild {
  const stdout = child.stdout as Readable;
  const stderr = child.stderr as Readable;
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
    child.stdin?.destroy();
    return exit;
  });

  return {
    pid,
    exited: leaderExited,
    finished,
    write(data) {
      const stdin = child.stdin;
      if (stdin === null || stdin.destroyed || stdin.writableEnded) {
        return Promise.reject(new Error("stdin is closed"));
      }
      return new Promise<void>((resolve, reject) => {
        // Node reports a write cut short by destroy() (the drain after the exit) as a success.
        stdin.write(data, (error) => (error || stdin.destroyed ? reject(error ?? new Error("stdin was closed before the write completed")) : resolve()));
      });
    },
    closeInput() {
      child.stdin?.end();
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
