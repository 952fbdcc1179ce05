import { abortableDelay, linkSignals, raceSignal } from "../../shared/abort.js";
import { ProcessError } from "../errors.js";
import type { ManagedProcess, ProcessExit } from "../managed-process.js";
import type { OutputReader, OutputStreamName, StreamOffsets } from "../output/index.js";
import { compileLogPattern, LineScanner, type LogMatch } from "./log-pattern.js";
import { type HttpCheck, probePort } from "./port-probe.js";

/** The longest time limit a wait takes, in milliseconds: the largest a timer can hold. */
export const maxWaitTimeoutMs = 2_147_483_647;

/** Milliseconds between a port wait's tries by default. */
export const defaultPortIntervalMs = 100;

/** The most one try at a port may take, in milliseconds, before it counts as failed. */
const probeTimeoutMs = 2000;

/** Bytes of output a log wait scans before it lets the daemon's other work run (about 2.5 ms of matching). */
const scanSliceBytes = 256 * 1024;

/** Lines of each stream a failed wait reports, at most. */
const tailLines = 20;

/** Bytes of each stream a failed wait reports, at most. */
const tailBytes = 1024;

/** What every wait is bounded by. */
export interface WaitBounds {
  /** Time limit in milliseconds; 0 for none. At most {@link maxWaitTimeoutMs}. */
  readonly timeoutMs: number;
  /**
   * The caller's signal (its call's): the wait stops at once when it aborts and rejects with its
   * reason, leaving nothing behind (no timer, no socket, no reader).
   */
  readonly signal: AbortSignal;
}

/** What {@link waitForPort} waits for. */
export interface PortWait extends WaitBounds {
  /** The TCP port, 1 to 65535. */
  readonly port: number;
  /** The host to connect to; empty for 127.0.0.1 and ::1 (either is enough). */
  readonly host: string;
  /** An HTTP check instead of a bare connection, when given. */
  readonly http?: HttpCheck;
  /** Milliseconds between tries; {@link defaultPortIntervalMs} when 0, else 10 to 60000. */
  readonly intervalMs: number;
  /** The process the wait is tied to: its exit ends the wait at once with PROCESS_EXITED. */
  readonly process?: ManagedProcess;
}

/** What answered a {@link waitForPort}. */
export interface PortReady {
  /** The address that answered ("127.0.0.1:3000"). */
  readonly address: string;
  /** The HTTP status; 0 for a bare connection. */
  readonly httpStatus: number;
  /** Tries made. */
  readonly attempts: number;
  /** How long the wait took, in milliseconds. */
  readonly waitedMs: number;
}

/** What {@link waitForLog} looks for. */
export interface LogWait extends WaitBounds {
  /** A regular expression, matched against each line (see `compileLogPattern`). */
  readonly pattern: string;
  /** The streams to search. */
  readonly streams: readonly OutputStreamName[];
  /** Where to start in each stream; 0 for everything retained. */
  readonly from: Readonly<StreamOffsets>;
}

/**
 * Waits until `port` accepts a TCP connection (or answers `http`'s GET with a status in its range),
 * trying every `intervalMs`. Throws a ProcessError: INVALID_ARGUMENT (with the `field`) for a bad
 * request; PROCESS_EXITED at once when the tied process exits first (or has exited); WAIT_TIMED_OUT
 * on the time limit, saying what the last try found (`last_probe`).
 */
export async function waitForPort(wait: PortWait): Promise<PortReady> {
  if (!Number.isInteger(wait.port) || wait.port < 1 || wait.port > 65535)
    throw invalidArgument("port", `port ${wait.port} is not between 1 and 65535`);
  if (wait.http !== undefined) {
    if (!wait.http.path.startsWith("/")) throw invalidArgument("http.path", 'http.path must start with "/"');
    const { minStatus, maxStatus } = wait.http;
    if (minStatus < 100 || maxStatus > 599 || minStatus > maxStatus)
      throw invalidArgument("http", `status range ${minStatus}-${maxStatus} is not within 100-599`);
  }
  if (wait.intervalMs !== 0 && (wait.intervalMs < 10 || wait.intervalMs > 60_000))
    throw invalidArgument("interval_ms", "interval_ms must be from 10 to 60000");
  checkTimeout(wait.timeoutMs);
  const waitingFor = `port ${wait.port}${wait.http === undefined ? "" : ` (HTTP ${wait.http.path})`}`;
  const hosts = wait.host === "" ? ["127.0.0.1", "::1"] : [wait.host];
  const intervalMs = wait.intervalMs || defaultPortIntervalMs;
  const started = performance.now();
  const bounded = boundedSignal(wait);
  try {
    return await probeUntilReady(wait, bounded, hosts, waitingFor, intervalMs, started);
  } finally {
    bounded.dispose();
  }
}

async function probeUntilReady(
  wait: PortWait,
  bounded: BoundedSignal,
  hosts: readonly string[],
  waitingFor: string,
  intervalMs: number,
  started: number,
): Promise<PortReady> {
  let attempts = 0;
  // What the last finished try at each address found, in the order of `hosts`: a try the time limit cut short
  // leaves the one before it.
  const lastFound = new Map<string, string>();
  const lastProbe = () => [...lastFound.values()].join("; ");
  // One reaction to the exit for the whole wait, not one per pause (a long wait pauses thousands of times).
  const exited = new AbortController();
  void wait.process?.exited.then(() => exited.abort());
  for (;;) {
    if (wait.process?.exit !== undefined) throw exitedFirst(wait.process, waitingFor);
    for (const host of hosts) {
      attempts++;
      const remaining = bounded.remainingMs();
      const limitCutsIt = remaining < probeTimeoutMs;
      const result = await probePort(
        host,
        wait.port,
        wait.http,
        limitCutsIt ? remaining : probeTimeoutMs,
        bounded.signal,
      );
      if (result.ok) {
        return {
          address: result.address,
          httpStatus: result.httpStatus,
          attempts,
          waitedMs: performance.now() - started,
        };
      }
      if (bounded.signal.aborted) break;
      // A try given only what was left of the time limit, and timed out, was cut short by the limit
      // (its timer and the limit's end at once, in either order): what a finished try before it found
      // says more, and is kept.
      if (limitCutsIt && result.problem === "timed out" && lastFound.has(host)) break;
      lastFound.set(host, `${result.address}: ${result.problem}`);
    }
    bounded.throwIfEnded(waitingFor, wait.process, { last_probe: lastProbe() });
    // The next try waits for the interval, the exit, the time limit or the caller, whichever comes first.
    const pause = linkSignals(bounded.signal, exited.signal);
    await abortableDelay(intervalMs, pause.signal).catch(() => {});
    pause.dispose();
    bounded.throwIfEnded(waitingFor, wait.process, { last_probe: lastProbe() });
  }
}

/**
 * Waits until a line of `managed`'s output matches `wait.pattern` and resolves with the first match,
 * in arrival order. The retained output from `wait.from` is searched first, then the live output, so
 * a line printed before the wait began is found too. Throws a ProcessError: PATTERN_INVALID for a
 * pattern the daemon does not run; OFFSET_OUT_OF_RANGE for an offset beyond the output;
 * PROCESS_EXITED once the output has ended without a match; WAIT_TIMED_OUT on the time limit.
 */
export async function waitForLog(managed: ManagedProcess, wait: LogWait): Promise<LogMatch> {
  const pattern = compileLogPattern(wait.pattern);
  checkTimeout(wait.timeoutMs);
  const waitingFor = `log /${wait.pattern}/`;
  const scanners = new Map(
    wait.streams.map((stream) => [stream, new LineScanner(pattern, stream, wait.from[stream])] as const),
  );
  const reader = managed.readOutput(wait.from);
  const bounded = boundedSignal(wait);
  try {
    return await scanUntilMatch(managed, reader, scanners, bounded, waitingFor);
  } finally {
    bounded.dispose();
  }
}

async function scanUntilMatch(
  managed: ManagedProcess,
  reader: OutputReader,
  scanners: ReadonlyMap<OutputStreamName, LineScanner>,
  bounded: BoundedSignal,
  waitingFor: string,
): Promise<LogMatch> {
  let sinceYield = 0;
  for await (const item of reader.items({ follow: true, signal: bounded.signal })) {
    const scanner = scanners.get(item.stream);
    if (scanner === undefined) continue;
    if (item.kind === "gap") {
      scanner.restartAt(item.offset + item.missedBytes);
      continue;
    }
    const found = scanner.feed(item.offset, item.data);
    if (found !== undefined) return found;
    // Retained output is read without a pause (the reader's waits are microtasks): megabytes of it
    // would hold the daemon's loop, so every so often the other calls get their turn.
    sinceYield += item.data.length;
    if (sinceYield >= scanSliceBytes) {
      sinceYield = 0;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
  bounded.throwIfEnded(waitingFor, managed);
  // The output ended: the last lines have no newline.
  for (const scanner of scanners.values()) {
    const found = scanner.finish();
    if (found !== undefined) return found;
  }
  throw exitedFirst(managed, waitingFor);
}

/**
 * Waits until `managed` exits and resolves with its exit (at once when it has). Throws a
 * ProcessError WAIT_TIMED_OUT on the time limit; the process runs on.
 */
export async function waitForExit(managed: ManagedProcess, wait: WaitBounds): Promise<ProcessExit> {
  checkTimeout(wait.timeoutMs);
  if (managed.exit !== undefined) return managed.exit;
  const bounded = boundedSignal(wait);
  try {
    await raceSignal(managed.exited, bounded.signal).catch(() => {});
    if (managed.exit !== undefined) return managed.exit;
    bounded.throwIfEnded("exit", managed);
    return await managed.exited;
  } finally {
    bounded.dispose();
  }
}

/**
 * The last lines of a process's retained output, per stream, as ErrorInfo metadata: `last_stdout`
 * and `last_stderr`, each at most {@link tailLines} lines and {@link tailBytes} bytes (the end of a
 * longer line), decoded as UTF-8; a stream with no output is left out.
 */
export function lastOutputLines(managed: ManagedProcess): Record<string, string> {
  const lines: Record<string, string> = {};
  for (const stream of ["stdout", "stderr"] as const) {
    const text = tailText(managed.snapshotOutput(stream));
    if (text !== "") lines[`last_${stream}`] = text;
  }
  return lines;
}

/** The end of `bytes`: at most {@link tailLines} lines in at most {@link tailBytes} bytes, without the last newline. */
function tailText(bytes: Uint8Array): string {
  let end = bytes.length;
  if (bytes[end - 1] === 0x0a) end--;
  let start = Math.max(0, end - tailBytes);
  // Start at a line's beginning where a whole line fits.
  const lineStart = bytes.indexOf(0x0a, start);
  if (start > 0 && lineStart !== -1 && lineStart < end) start = lineStart + 1;
  let newlines = 0;
  for (let index = end - 1; index >= start; index--) {
    if (bytes[index] === 0x0a && ++newlines === tailLines) {
      start = index + 1;
      break;
    }
  }
  // A terminal ends its lines with \r\n: the lines, not the terminal's line discipline.
  return new TextDecoder().decode(bytes.subarray(start, end)).replace(/\r+(?=\n|$)/g, "");
}

function checkTimeout(timeoutMs: number): void {
  if (!Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > maxWaitTimeoutMs)
    throw invalidArgument("timeout_ms", `timeout_ms must be from 0 to ${maxWaitTimeoutMs}`);
}

function invalidArgument(field: string, message: string): ProcessError {
  return new ProcessError(message, "INVALID_ARGUMENT", { metadata: { field } });
}

/** The exit in words: "exit code 1", "signal SIGKILL", "could not start: ...". */
function exitText(exit: ProcessExit): string {
  if (exit.status === "error") return `could not start${exit.error ? `: ${exit.error}` : ""}`;
  return exit.signal !== null ? `signal ${exit.signal}` : `exit code ${exit.exitCode}`;
}

/** PROCESS_EXITED for `managed`, which has exited before `waitingFor` came. */
function exitedFirst(managed: ManagedProcess, waitingFor: string): ProcessError {
  const exit = managed.exit!;
  const metadata: Record<string, string> = {
    process_id: managed.id,
    waiting_for: waitingFor,
    status: exit.status.toUpperCase(),
    signal: exit.signal ?? "",
    ...lastOutputLines(managed),
  };
  if (exit.exitCode !== null) metadata.exit_code = String(exit.exitCode);
  return new ProcessError(`process ${managed.id} exited before ${waitingFor} (${exitText(exit)})`, "PROCESS_EXITED", {
    metadata,
  });
}

/** The caller's signal linked with a wait's time limit: see {@link boundedSignal}. */
interface BoundedSignal {
  /** Aborts when the caller's signal does or the time limit passes. */
  readonly signal: AbortSignal;
  /** Milliseconds left before the limit (a day when there is none), at least 1. */
  remainingMs(): number;
  /** Throws WAIT_TIMED_OUT once the limit passed, the caller's reason once it aborted; else nothing. */
  throwIfEnded(waitingFor: string, managed: ManagedProcess | undefined, extra?: Record<string, string>): void;
  /** Clears the timer and the link. */
  dispose(): void;
}

/**
 * The caller's signal linked with the time limit: `signal` aborts on either. `throwIfEnded` throws
 * WAIT_TIMED_OUT once the limit passed, the caller's reason once it aborted, nothing otherwise.
 */
function boundedSignal(wait: WaitBounds): BoundedSignal {
  const linked = linkSignals(wait.signal);
  const deadline = wait.timeoutMs > 0 ? performance.now() + wait.timeoutMs : Infinity;
  let timedOut = false;
  const timer =
    wait.timeoutMs > 0
      ? setTimeout(() => {
          timedOut = true;
          linked.abort();
        }, wait.timeoutMs)
      : undefined;
  return {
    signal: linked.signal,
    remainingMs: () => Math.max(1, Math.min(deadline - performance.now(), 86_400_000)),
    throwIfEnded(waitingFor: string, managed: ManagedProcess | undefined, extra: Record<string, string> = {}): void {
      if (wait.signal.aborted) throw wait.signal.reason;
      if (!timedOut) return;
      const metadata: Record<string, string> = {
        timeout_ms: String(wait.timeoutMs),
        waiting_for: waitingFor,
        ...extra,
      };
      if (managed !== undefined) Object.assign(metadata, { process_id: managed.id, ...lastOutputLines(managed) });
      throw new ProcessError(
        `timed out after ${wait.timeoutMs} ms waiting for ${waitingFor}${managed === undefined ? "" : ` of process ${managed.id}`}`,
        "WAIT_TIMED_OUT",
        { metadata },
      );
    },
    dispose() {
      clearTimeout(timer);
      linked.dispose();
    },
  };
}
