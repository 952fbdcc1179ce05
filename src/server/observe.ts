import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import pino, { type Logger } from "pino";
import { sandboxdVersion } from "../shared/version.js";
import { exitCauses } from "../shared/exit-cause.js";
import { createLogDestination } from "./log-destination.js";
import { createPrettyStream } from "./pretty-stream.js";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { memoryReclaims, type ProcessDescription, type ProcessExit, type ProcessManager } from "../process/index.js";
import { callDetailsKey, interceptOutcome, peerKey, type ProcessAudit } from "./rpc/index.js";
import { codeToString } from "@connectrpc/connect/protocol-connect";

/** Log levels, quietest last. */
export const logLevels = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;
/** One of {@link logLevels}. */
export type LogLevel = (typeof logLevels)[number];

/** Options for {@link createLogger}. */
export interface LoggerOptions {
  /** Least level written. Default "info". */
  level?: LogLevel;
  /** JSON lines, or colored lines for people. Default: pretty when stderr is a terminal, else JSON. */
  format?: "json" | "pretty";
  /** Where lines go. Default: stderr. */
  destination?: NodeJS.WritableStream;
}

/**
 * Creates the daemon's logger: pino, JSON lines on stderr with a time, a level name and a message;
 * pretty lines (pino-pretty, in-process) when asked or when stderr is a terminal. pino writes a line
 * with a few microseconds of work and no thread, which is what a line per call needs; JSON lines are
 * held up to 100 ms and written together (see {@link createLogDestination}: what a crash may lose).
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const pretty = options.format === "pretty" || (options.format === undefined && process.stderr.isTTY === true);
  const base = {
    level: options.level ?? "info",
    base: { service: "sandboxd" },
    formatters: { level: (label: string) => ({ level: label }) },
  };
  if (pretty) {
    const prettyStream = createPrettyStream({
      destination: options.destination ?? process.stderr,
      colorize: options.destination === undefined && process.stderr.isTTY === true,
    });
    const logger = pino({ ...base, formatters: undefined }, prettyStream);
    forPeople.add(logger);
    return logger;
  }
  return pino(base, options.destination ?? createLogDestination());
}

/** Loggers writing pretty lines for a person (see {@link createLogger}). */
const forPeople = new WeakSet<Logger>();

/**
 * The level of the lines each call and each process start writes: `info` in JSON (machines keep
 * them all), `debug` on a terminal, where one `sandbox exec -- true` wrote four of them and a person
 * wants the exit line (and every failure, at `warn`) only; `--log-level debug` shows them all.
 */
function routineLevel(logger: Logger): "info" | "debug" {
  return forPeople.has(logger) ? "debug" : "info";
}

/** The daemon's Prometheus metrics (prom-client, on a registry of its own). */
export interface DaemonMetrics {
  readonly registry: Registry;
  readonly calls: Counter<"procedure" | "code">;
  readonly callSeconds: Histogram<"procedure">;
  readonly starts: Counter<"result">;
  /** Processes that ended, by their exit cause (every cause present from the start, at 0). */
  readonly exits: Counter<"cause">;
  /** CPU time the processes that ended used, whole trees, by mode (user, system): from their own cgroups. */
  readonly processCpuSeconds: Counter<"mode">;
  /** The peak memory of each process that ended, whole tree, from its own memory cgroup. */
  readonly processMemoryPeakBytes: Histogram;
  readonly outputBytes: Counter<"stream">;
  readonly authFailures: Counter;
  readonly connectionsTurnedAway: Counter<"how">;
}

/**
 * Creates the metrics: calls by procedure and code with latency histograms, process starts by
 * result, process exits by cause, the CPU time and peak memory of the processes that ended, output bytes per stream,
 * auth failures, gauges read at scrape time (processes by status, output retained and dropped, connections), and
 * Node's own process metrics.
 */
export function createDaemonMetrics(source: { manager: ProcessManager; connections(): number }): DaemonMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "sandboxd_" });
  const calls = new Counter({
    name: "sandboxd_calls_total",
    help: "Calls answered, by procedure and status code.",
    labelNames: ["procedure", "code"],
    registers: [registry],
  });
  const callSeconds = new Histogram({
    name: "sandboxd_call_duration_seconds",
    help: "Time from a call's start to its answer (unary) or end (streams).",
    labelNames: ["procedure"],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120],
    registers: [registry],
  });
  const starts = new Counter({
    name: "sandboxd_process_starts_total",
    help: "Processes started (spawned) or that failed to start.",
    labelNames: ["result"],
    registers: [registry],
  });
  const exits = new Counter({
    name: "sandboxd_process_exits_total",
    help: "Processes that ended, by cause: exited, signaled, killed_on_request, timed_out, out_of_memory, daemon_shutdown, start_failed, unknown.",
    labelNames: ["cause"],
    registers: [registry],
  });
  for (const cause of exitCauses) exits.inc({ cause }, 0);
  const processCpuSeconds = new Counter({
    name: "sandboxd_command_cpu_seconds_total",
    help: "CPU time used by processes that ended (each its whole tree, read from its own cgroup), by mode: user, system.",
    labelNames: ["mode"],
    registers: [registry],
  });
  for (const mode of ["user", "system"]) processCpuSeconds.inc({ mode }, 0);
  const processMemoryPeakBytes = new Histogram({
    name: "sandboxd_command_memory_peak_bytes",
    help: "Peak memory of each process that ended (its whole tree, page cache included, from its own memory cgroup).",
    buckets: [1, 4, 16, 64, 256, 1024, 4096].map((mib) => mib * 1024 * 1024),
    registers: [registry],
  });
  const outputBytes = new Counter({
    name: "sandboxd_output_bytes_total",
    help: "Output bytes read from commands, per stream.",
    labelNames: ["stream"],
    registers: [registry],
  });
  const buildInfo = new Gauge({
    name: "sandboxd_build_info",
    help: "Always 1; the labels say which sandboxd and Node run.",
    labelNames: ["version", "node"],
    registers: [registry],
  });
  buildInfo.set({ version: sandboxdVersion, node: process.version }, 1);
  const authFailures = new Counter({
    name: "sandboxd_auth_failures_total",
    help: "Calls refused for a missing or wrong token.",
    registers: [registry],
  });
  const connectionsTurnedAway = new Counter({
    name: "sandboxd_connections_turned_away_total",
    help: "Connections closed by the connection budget: displaced (made no authenticated call, closed for a newcomer) or refused (a newcomer, every connection proven).",
    labelNames: ["how"],
    registers: [registry],
  });
  new Gauge({
    name: "sandboxd_processes",
    help: "Process records, by status.",
    labelNames: ["status"],
    registers: [registry],
    collect() {
      this.reset();
      for (const managed of source.manager.list()) this.inc({ status: managed.status });
    },
  });
  new Gauge({
    name: "sandboxd_output_retained_bytes",
    help: "Output bytes the records retain.",
    registers: [registry],
    collect() {
      this.set(source.manager.list().reduce((total, managed) => total + managed.retainedBytes, 0));
    },
  });
  new Gauge({
    name: "sandboxd_memory_budget_bytes",
    help: "The budget for output and stdin input held for all commands together (--max-retained-bytes), by kind: limit, used.",
    labelNames: ["kind"],
    registers: [registry],
    collect() {
      this.set({ kind: "limit" }, source.manager.budget.limitBytes);
      this.set({ kind: "used" }, source.manager.budget.usedBytes);
    },
  });
  new Gauge({
    name: "sandboxd_output_dropped_bytes",
    help: "Output bytes the current records dropped to stay within their bounds (readers got a gap).",
    registers: [registry],
    collect() {
      this.set(
        source.manager
          .list()
          .reduce((total, managed) => managed.droppedOutput().reduce((sum, gap) => sum + gap.missedBytes, total), 0),
      );
    },
  });
  let reclaimsCounted = 0;
  new Counter({
    name: "sandboxd_memory_reclaims_total",
    help: "Collections run to give memory back after work (V8's low-memory collection and malloc_trim): after 100 process starts and a quiet second, or 16 MiB of output released.",
    registers: [registry],
    collect() {
      const reclaims = memoryReclaims();
      this.inc(reclaims - reclaimsCounted);
      reclaimsCounted = reclaims;
    },
  });
  new Gauge({
    name: "sandboxd_connections",
    help: "Open client connections.",
    registers: [registry],
    collect() {
      this.set(source.connections());
    },
  });
  return {
    registry,
    calls,
    callSeconds,
    starts,
    exits,
    processCpuSeconds,
    processMemoryPeakBytes,
    outputBytes,
    authFailures,
    connectionsTurnedAway,
  };
}

/**
 * Creates an interceptor that logs one line per call (procedure, peer, status code, duration, and
 * what the handler added to the call's details: the process id where the call names one, a file
 * call's path and bytes) and counts it in the metrics, for unary calls at their
 * answer and for streams at their end. Never logs a header, a token or a request body.
 */
export function createObserveInterceptor(logger: Logger, metrics: DaemonMetrics): Interceptor {
  return interceptOutcome((request) => {
    const started = performance.now();
    const procedure = `${request.service.typeName}/${request.method.name}`;
    const peer = request.contextValues.get(peerKey);
    return {
      ended(error, streaming) {
        // A stream that ran out because its caller went away counts as cancelled.
        const failure =
          error ?? (streaming && request.signal.aborted ? new ConnectError("canceled", Code.Canceled) : undefined);
        const code = failure === undefined ? "ok" : codeToString(ConnectError.from(failure).code);
        const seconds = (performance.now() - started) / 1000;
        metrics.calls.inc({ procedure, code });
        metrics.callSeconds.observe({ procedure }, seconds);
        const details = request.contextValues.get(callDetailsKey);
        const line = {
          procedure,
          peer: peer?.address,
          subject: peer?.subject,
          ...details,
          code,
          durationMs: Math.round(seconds * 1e5) / 100,
        };
        if (failure === undefined || code === "canceled") logger[routineLevel(logger)](line, "call");
        else logger.warn({ ...line, error: ConnectError.from(failure).rawMessage }, "call");
      },
    };
  });
}

/** Options for {@link createProcessAudit}. */
export interface ProcessAuditOptions {
  /** Log command lines and arguments (they may carry secrets). Default false: the program name only. */
  logCommands?: boolean;
}

/**
 * Creates the process audit: a line when a process starts (who asked: peer and certificate subject;
 * what ran: program name, cwd, user, pid) and one when it ends (status, code, signal, cause with its
 * kill origin or start stage and errno, duration, and what it used where its cgroups say), counting starts and exits by
 * cause in the metrics, with the CPU time and peak memory of those that ended. Environment values never; command lines only with `logCommands`.
 */
export function createProcessAudit(
  logger: Logger,
  metrics: DaemonMetrics,
  options: ProcessAuditOptions = {},
): ProcessAudit {
  return {
    started(managed, peer, user) {
      const { description } = managed;
      const what = {
        processId: description.id,
        pid: managed.pid,
        program: programName(description),
        ...(options.logCommands ? { command: description.command, args: description.args } : {}),
        cwd: description.cwd,
        user,
        pty: description.pty,
        peer: peer?.address,
        subject: peer?.subject,
      };
      metrics.starts.inc({ result: managed.status === "error" ? "failed" : "spawned" });
      logger[routineLevel(logger)](what, "process started");
      void managed.exited.then((exit: ProcessExit) => {
        const line = {
          processId: managed.id,
          program: what.program,
          pid: managed.pid,
          status: exit.status,
          exitCode: exit.exitCode,
          signal: exit.signal,
          timedOut: exit.timedOut,
          cause: exit.cause,
          ...(exit.killOrigin === undefined ? {} : { killOrigin: exit.killOrigin }),
          ...(exit.startStage === undefined ? {} : { startStage: exit.startStage, errno: exit.errno }),
          durationMs: Math.round(exit.durationMs),
          ...(exit.usage === undefined ? {} : { usage: exit.usage }),
        };
        metrics.exits.inc({ cause: exit.cause });
        if (exit.usage?.cpuUserUs !== undefined)
          metrics.processCpuSeconds.inc({ mode: "user" }, exit.usage.cpuUserUs / 1e6);
        if (exit.usage?.cpuSystemUs !== undefined)
          metrics.processCpuSeconds.inc({ mode: "system" }, exit.usage.cpuSystemUs / 1e6);
        if (exit.usage?.memoryPeakBytes !== undefined)
          metrics.processMemoryPeakBytes.observe(exit.usage.memoryPeakBytes);
        if (exit.status === "error") logger.warn({ ...line, error: exit.error }, "process failed to start");
        else logger.info(line, "process exited");
      });
    },
  };
}

/** The program a record ran, without its arguments: the first word of a shell line, or the argv program. */
function programName(description: ProcessDescription): string {
  if (description.args.length > 0) return description.command;
  return description.command.trim().split(/\s+/)[0] ?? "";
}
