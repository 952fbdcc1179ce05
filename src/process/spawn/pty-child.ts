import { randomBytes } from "node:crypto";
import { closeSync, write } from "node:fs";
import net from "node:net";
import { ProcessError } from "../errors.js";
import tty from "node:tty";
import { outputDrainLimitMs, type ChildExit, type SpawnChildOptions, type SpawnedChild } from "./child.js";
import { executablePath, loadNativeAddon, parseHelperStatus } from "../native/index.js";
import { HelperStartError } from "./pipe-child.js";
import { listenForNativeExits, reapNow, watchNativeExit } from "./native-exits.js";

/** Options for {@link spawnPtyChild}. */
export interface SpawnPtyOptions extends SpawnChildOptions {
  cols: number;
  rows: number;
}

/**
 * Spawns a child in a new pseudo-terminal opened by the native addon; it leads a new session and
 * process group. Everything it prints arrives as stdout.
 *
 * To deliver all of its output every time, the parent holds the terminal's slave side open, so the
 * master never reports EIO while output is still queued. When the child exits, the parent writes a
 * random marker into the slave; the terminal is first-in first-out, so once the marker comes out of
 * the master, everything the child wrote before it has been read.
 *
 * With `statusFd`, resolves once the native helper exec'd the command, or rejects with a
 * {@link HelperStartError} for the step it failed at (the terminal then closes as after any exit).
 */
export function spawnPtyChild(options: SpawnPtyOptions): Promise<SpawnedChild> {
  const term = openTerminal(options);
  const child = createPtyChild(term, options);
  return term.status === undefined ? Promise.resolve(child) : helperStarted(term.status).then(() => child);
}

/** Resolves once the helper's status fd closes empty (it exec'd the command); rejects with what it reported. */
function helperStarted(fd: number): Promise<void> {
  const status = new net.Socket({ fd, readable: true, writable: false });
  return new Promise((resolve, reject) => {
    let report = "";
    status.setEncoding("utf8");
    status.on("data", (text: string) => (report += text));
    status.on("error", () => {});
    status.once("close", () => {
      const failure = parseHelperStatus(report);
      if (failure === undefined) resolve();
      else reject(new HelperStartError(failure));
    });
  });
}

/** The child running in `term`: its output drained to the marker, its input, its size. */
function createPtyChild(term: Terminal, options: SpawnPtyOptions): SpawnedChild {
  const leaderExited = term.exited;
  const slaveFd = term.slaveFd;
  const marker = Buffer.from(`\x1b]sandboxd-drained;${randomBytes(12).toString("hex")}\x07`);
  const master = new tty.ReadStream(term.fd);
  let held = Buffer.alloc(0);
  let exited = false;
  let paused = false;
  let drained = false;
  let resolveDrained!: () => void;
  const outputDrained = new Promise<void>((resolve) => (resolveDrained = resolve));
  const finishDrain = () => {
    if (drained) return;
    drained = true;
    if (held.length > 0) options.onOutput("stdout", held);
    held = Buffer.alloc(0);
    resolveDrained();
  };

  master.on("data", (data: Buffer) => {
    if (drained) return;
    if (!exited) {
      options.onOutput("stdout", data);
      return;
    }
    // After exit the marker may arrive split across reads: hold back a possible prefix of it.
    const combined = held.length === 0 ? data : Buffer.concat([held, data]);
    const at = combined.indexOf(marker);
    if (at >= 0) {
      held = Buffer.alloc(0);
      if (at > 0) options.onOutput("stdout", combined.subarray(0, at));
      finishDrain();
      return;
    }
    const keep = Math.min(combined.length, marker.length - 1);
    if (combined.length > keep) options.onOutput("stdout", combined.subarray(0, combined.length - keep));
    held = Buffer.from(combined.subarray(combined.length - keep));
  });
  // EIO: the slave side is gone and everything that was queued has been read.
  master.on("error", finishDrain);
  master.on("close", finishDrain);

  // Writes to the master still under way; each stops once the leader has exited (see finished).
  const pendingInput = new Set<Promise<void>>();
  const writeInput = (data: Uint8Array): Promise<void> => {
    const written = writeAll(term.fd, data, () => exited).then((complete) => {
      if (!complete) throw new Error("stdin is closed: the process exited");
    });
    const settled = written.then(
      () => {},
      () => {},
    );
    pendingInput.add(settled);
    void settled.then(() => pendingInput.delete(settled));
    return written;
  };

  const finished = leaderExited.then(async (exit) => {
    exited = true;
    // A child that filled the terminal before exiting leaves no room for the marker until the
    // master is read: retry until it fits, and stop once drained.
    // Without the slave fd the output ends with EIO instead (see above).
    const markerWritten =
      slaveFd !== undefined ? writeAll(slaveFd, marker, () => drained).catch(finishDrain) : Promise.resolve();
    // Input still being written stops at its next step; it must have settled before the master
    // closes, or its retries would write into whatever file reuses the fd number.
    const inputSettled = Promise.all(pendingInput);
    // A safety net for a marker that never comes out; time spent paused for a slow reader does not
    // count, or that reader would lose what is still queued in the terminal.
    let limit: NodeJS.Timeout | undefined;
    const armLimit = () => {
      limit = setTimeout(() => (paused ? armLimit() : finishDrain()), outputDrainLimitMs * 4);
    };
    armLimit();
    await outputDrained;
    clearTimeout(limit);
    // No write of the marker may still be under way when the fd is closed and its number reused.
    await markerWritten;
    await inputSettled;
    if (slaveFd !== undefined) closeSync(slaveFd);
    master.destroy();
    return exit;
  });

  let inputClosed = false;
  // Whether the terminal's line buffer is empty as far as our input goes: VEOF (^D) ends the input
  // only at the start of a line; after a partial line it merely hands that line to the reader.
  let atLineStart = true;
  return {
    pid: term.pid,
    exited: leaderExited,
    hasExited: term.hasExited,
    finished,
    write(data) {
      if (inputClosed || exited) return Promise.reject(new Error("stdin is closed"));
      // A line ends with \n or \r; ^D (VEOF) hands it over as it is, ^C (VINTR) and ^U (VKILL) discard it.
      if (data.length > 0) atLineStart = [0x0a, 0x0d, 0x04, 0x03, 0x15].includes(data[data.length - 1]!);
      return writeInput(data);
    },
    closeInput() {
      if (inputClosed || exited) return;
      inputClosed = true;
      // VEOF (^D) at the start of a line is end-of-file for a program reading the terminal; after a
      // partial line the first one delivers that line and the second is the end-of-file.
      void writeInput(Buffer.from(atLineStart ? [0x04] : [0x04, 0x04])).catch(() => {});
    },
    resize(cols, rows) {
      if (!drained) term.resize(cols, rows);
    },
    pauseOutput() {
      paused = true;
      master.pause();
    },
    resumeOutput() {
      paused = false;
      master.resume();
    },
  };
}

/** A command started in a new terminal: its pid, the master, the slave held open, its exit. */
interface Terminal {
  pid: number;
  /** The master side, non-blocking. */
  fd: number;
  /** The slave side held by the parent (non-blocking), or undefined when the child closed it first. */
  slaveFd: number | undefined;
  /** The read end of the helper's status fd, with `statusFd`. */
  status?: number;
  exited: Promise<ChildExit>;
  /** Asks the OS now whether the leader has exited, where the spawner can. */
  hasExited?(): boolean;
  resize(cols: number, rows: number): void;
}

/**
 * Starts the command in a new pseudo-terminal through the addon's posix_spawn (openpty, no fork of
 * the daemon); a daemon without the addon refuses it (SPAWN_FAILED).
 */
function openTerminal(options: SpawnPtyOptions): Terminal {
  const addon = loadNativeAddon();
  if (addon !== null) {
    const env = Object.entries(options.env).map(([key, value]) => `${key}=${value}`);
    listenForNativeExits(addon);
    const spawned = addon.spawn(
      executablePath(options.file, options.env.PATH ?? "", options.cwd),
      [options.file, ...options.args],
      env,
      {
        cwd: options.cwd || undefined,
        stdin: false,
        statusFd: options.statusFd ?? false,
        pty: { cols: options.cols, rows: options.rows },
      },
    );
    const master = spawned.master!;
    return {
      pid: spawned.pid,
      fd: master,
      slaveFd: spawned.slave,
      status: spawned.status,
      exited: watchNativeExit(addon, spawned.pid),
      hasExited: () => reapNow(spawned.pid),
      resize: (cols, rows) => addon.resize(master, cols, rows),
    };
  }
  // node-pty's public API gives no fd of the terminal, so the drain above could not work through it, and
  // reaching into its private module and raw fork would break with any release: without the addon, no PTY.
  throw new ProcessError(
    "terminal commands need the native addon (build/sandboxd.node, built at install with a C compiler), which is not loaded",
    "SPAWN_FAILED",
  );
}

/**
 * Writes all of `data` to a non-blocking fd, retrying on EAGAIN. Resolves true once everything was
 * written, or false as soon as `stopped` returns true (checked before every write), so the caller
 * can close the fd without a retry landing in a file that reuses its number.
 */
function writeAll(fd: number, data: Uint8Array, stopped: () => boolean): Promise<boolean> {
  return new Promise<boolean>((resolve, reject) => {
    let offset = 0;
    const step = () => {
      if (stopped()) return resolve(false);
      write(fd, data, offset, data.length - offset, null, (error, written) => {
        if (error) {
          if ((error as NodeJS.ErrnoException).code === "EAGAIN") return void setTimeout(step, 5);
          return reject(error);
        }
        offset += written;
        if (offset < data.length) step();
        else resolve(true);
      });
    };
    step();
  });
}
