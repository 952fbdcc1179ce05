import pino from "pino";

/** Options for {@link createLogDestination}. */
export interface LogDestinationOptions {
  /** The file descriptor lines are written to. Default 2 (stderr). */
  fd?: number;
  /** Bytes of lines held before they are written. Default 4096. */
  bufferBytes?: number;
  /** Longest a line is held, in milliseconds. Default 100. */
  maxDelayMs?: number;
}

/** A pino destination that holds lines briefly: see {@link createLogDestination}. */
export interface LogDestination extends pino.DestinationStream {
  /** Writes what is held now (synchronously); `done` is called once it is written. */
  flush(done?: (error?: Error) => void): void;
}

/** Most bytes of lines a destination holds while its writes fail. */
const maxHeldBytes = 1024 * 1024;

/** pino's marker for a destination that wants each line's level (`lastLevel`) before the line. */
const wantsMetadata = Symbol.for("pino.metadata");

/** pino's number for `warn`. */
const warnLevel = 40;

/**
 * Creates the destination of the daemon's JSON log lines: they are held until 4 KiB are waiting or
 * the oldest has waited 100 ms, then written together in one synchronous write(2) (sonic-boom's
 * `minLength`). A line per call and two per process each cost a write, and each write woke whatever
 * reads the daemon's stderr (journald, a container runtime, a terminal's pipe): a tenth of the
 * daemon's busy time per exec. A `warn` line or worse is written at once, with what is held before it,
 * so failures are never late and keep their order.
 *
 * What a crash may lose: the lines of the last 100 ms, at most 4 KiB of them, when the daemon is
 * killed by a signal it cannot handle (SIGKILL, the OOM killer) or crashes in native code. Everything
 * held is written before the process exits in every other way: `process.exit`, an uncaught exception
 * or rejection, the end of the event loop (Node's `exit` event).
 */
export function createLogDestination(options: LogDestinationOptions = {}): LogDestination {
  const maxDelayMs = options.maxDelayMs ?? 100;
  const sonic = pino.destination({
    fd: options.fd ?? 2,
    sync: true,
    minLength: options.bufferBytes ?? 4096,
    // A write that keeps failing (a full disk under a redirected stderr) holds lines for the next
    // flush: at most this many bytes of them, the newer ones dropped.
    maxLength: maxHeldBytes,
  });
  let held = false;
  // Once nobody can read the log any more (EPIPE: its reader went away; EBADF: the fd was closed),
  // lines are dropped. Other failures (ENOSPC) are retried with the next flush.
  let broken = false;
  sonic.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE" || error.code === "EBADF") broken = true;
  });
  let timer: NodeJS.Timeout | undefined;
  const writeHeld = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    if (!held || broken) return;
    held = false;
    // Synchronous here (sync: true): no fsync, unlike sonic-boom's flushSync, which also retries a
    // write that failed with EPIPE forever (a daemon whose log reader left could never exit).
    sonic.flush();
  };
  const destination = {
    [wantsMetadata]: true,
    lastLevel: 0,
    write(line: string): boolean {
      if (broken) return true;
      sonic.write(line);
      held = true;
      if (destination.lastLevel >= warnLevel) writeHeld();
      else timer ??= setTimeout(writeHeld, maxDelayMs).unref();
      return true;
    },
    flush(done?: (error?: Error) => void): void {
      try {
        writeHeld();
        done?.();
      } catch (error) {
        done?.(error as Error);
      }
    },
  };
  writeAtExit.add(writeHeld);
  if (writeAtExit.size === 1) process.on("exit", () => writeAtExit.forEach((write) => write()));
  return destination;
}

/** What each destination holds, written by one `exit` listener for all of them. */
const writeAtExit = new Set<() => void>();
