import type { Client } from "@connectrpc/connect";
import { OutputStream, type SandboxService } from "../../../gen/sandbox/v1/sandbox_pb.js";
import { SandboxError, toSandboxError } from "./errors.js";
import type { OutputStreamName } from "./output.js";
import { detailsFromProto, exitFromProto, type ProcessDetails, type ProcessExit } from "./process-record.js";

/**
 * Options of `waitForPort()`, as the Cloudflare Sandbox SDK's `WaitForPortOptions`: by default an
 * HTTP GET of `/` answered with a status from 200 to 399; `mode: "tcp"` only connects.
 */
export interface WaitForPortOptions {
  /** `"http"` (the default): GET `path` and check the status; `"tcp"`: a connection is enough. */
  mode?: "http" | "tcp";
  /** Path (and query) of the HTTP check; `"/"` by default. */
  path?: string;
  /** The status the HTTP check accepts: one, or a range; 200 to 399 by default. */
  status?: number | { min: number; max: number };
  /** Time limit in milliseconds; none by default. Its expiry is a ProcessReadyTimeoutError. */
  timeout?: number;
  /** Milliseconds between tries; 100 by default (10 to 60000). */
  interval?: number;
  /** Host the daemon connects to; 127.0.0.1 and ::1 by default (either answering is enough). */
  host?: string;
  /** Stops waiting (the daemon stops probing) when aborted; the wait rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** What answered a `waitForPort()`. */
export interface PortReady {
  /** The address that answered (`"127.0.0.1:3000"`). */
  address: string;
  /** The HTTP status of the answer; 0 for a TCP check. */
  httpStatus: number;
  /** How many tries it took. */
  attempts: number;
  /** How long the wait took, in milliseconds. */
  waitedMs: number;
}

/** Options of `waitForLog()`: the Cloudflare Sandbox SDK's `timeout`, and which stream to search. */
export interface WaitForLogOptions {
  /** Time limit in milliseconds; none by default. Its expiry is a ProcessReadyTimeoutError. */
  timeout?: number;
  /** The stream to search: `"stdout"`, `"stderr"` or `"both"` (the default). */
  stream?: OutputStreamName | "both";
  /** Where to start in each stream; 0 (everything the daemon retains) by default. */
  fromOffsets?: { stdout?: number; stderr?: number };
  /** Stops waiting when aborted; the wait rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** The line a `waitForLog()` found, as the Cloudflare Sandbox SDK's `WaitForLogResult`, with where it is. */
export interface WaitForLogResult {
  /** The whole line that matched, without its line ending. */
  line: string;
  /**
   * For a RegExp pattern, the match as `RegExp.exec` gives it on `line`: the matched text, the
   * groups (undefined where one took no part), `index`, `input` and named `groups`.
   */
  match?: RegExpExecArray;
  /** The stream the line came from. */
  stream: OutputStreamName;
  /** Byte offset of the match's first byte within its stream. */
  offset: number;
  /** Byte offset of the line's first byte within its stream. */
  lineOffset: number;
}

/** Options of `waitForExit()`. */
export interface WaitForExitOptions {
  /** Time limit in milliseconds; none by default. Its expiry is a ProcessReadyTimeoutError; the process runs on. */
  timeout?: number;
  /** Stops waiting (not the process) when aborted; the wait rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of `listPorts()`. */
export interface ListPortsOptions {
  /** Only the ports held by this process or the processes it started. */
  processId?: string;
  /** Cancels the call. */
  signal?: AbortSignal;
}

/** A TCP port listening inside the sandbox. */
export interface ListeningPort {
  /** The port. */
  port: number;
  /** The address it is bound to (`"0.0.0.0"`, `"::"`, `"127.0.0.1"`). */
  address: string;
  /** Whether it is an IPv6 socket. */
  ipv6: boolean;
  /** The pid of a process holding it; undefined when the daemon may not see which. */
  pid?: number;
  /** That process's program name (at most 15 characters); empty when unknown. */
  program: string;
  /** The id of the sandbox process whose tree holds it (the command or one it started); undefined when none. */
  processId?: string;
}

/** What the readiness calls need: the generated client. */
type Rpc = Client<typeof SandboxService>;

/** Flags of a RegExp that mean nothing for a pattern matched line by line from its start. */
const harmlessFlags = new Set(["g", "y", "d", "m", "s"]);

/**
 * The pattern the daemon runs for `pattern`: a string is matched as it is (its characters escaped),
 * a RegExp by its source. The daemon runs patterns without flags, in linear time: a RegExp with `i`,
 * `u` or `v` is a SandboxError INVALID_ARGUMENT here, before any call.
 */
export function logPatternSource(pattern: string | RegExp): string {
  if (typeof pattern === "string") return pattern.replace(/[.*+?^${}()|[\]\\/-]/g, "\\$&");
  const refused = [...pattern.flags].filter((flag) => !harmlessFlags.has(flag));
  if (refused.length > 0)
    throw new SandboxError(
      `waitForLog runs patterns without flags (in linear time): /${pattern.source}/${pattern.flags} has ${refused.join(", ")}; spell the cases out ("[Rr]eady") instead of i`,
      "INVALID_ARGUMENT",
    );
  return pattern.source;
}

/** Runs one readiness call, turning failures into SandboxErrors and an abort into the signal's reason. */
async function call<T>(signal: AbortSignal | undefined, run: () => Promise<T>): Promise<T> {
  if (signal?.aborted) throw signal.reason;
  try {
    return await run();
  } catch (error) {
    throw signal?.aborted ? signal.reason : toSandboxError(error);
  }
}

/**
 * Waits until `port` answers inside the sandbox (see {@link WaitForPortOptions}), checked by the
 * daemon; tied to `processId` when given, whose exit ends the wait at once with a
 * ProcessExitedBeforeReadyError. Rejects with a ProcessReadyTimeoutError on `timeout`.
 */
export function waitForPort(
  client: Rpc,
  port: number,
  options: WaitForPortOptions & { processId?: string } = {},
): Promise<PortReady> {
  const status = options.status ?? { min: 200, max: 399 };
  const range = typeof status === "number" ? { min: status, max: status } : status;
  if (options.mode !== undefined && options.mode !== "http" && options.mode !== "tcp")
    throw new SandboxError(`waitForPort's mode is "http" or "tcp", not ${String(options.mode)}`, "INVALID_ARGUMENT");
  return call(options.signal, async () => {
    const ready = await client.waitForPort(
      {
        port,
        host: options.host ?? "",
        http:
          options.mode === "tcp"
            ? undefined
            : { path: options.path ?? "/", minStatus: range.min, maxStatus: range.max },
        processId: options.processId ?? "",
        timeoutMs: options.timeout ?? 0,
        intervalMs: options.interval ?? 0,
      },
      { signal: options.signal },
    );
    const waited = ready.waited;
    return {
      address: ready.address,
      httpStatus: ready.httpStatus,
      attempts: ready.attempts,
      waitedMs: waited ? Number(waited.seconds) * 1000 + waited.nanos / 1e6 : 0,
    };
  });
}

/**
 * Waits until a line of the process's output matches `pattern` (a string as it is, or a RegExp)
 * and resolves with it; the output the daemon retains is searched first, so a line printed before
 * the call counts. Rejects with a ProcessExitedBeforeReadyError when the output ends without a
 * match, a ProcessReadyTimeoutError on `timeout`.
 */
export function waitForLog(
  client: Rpc,
  processId: string,
  pattern: string | RegExp,
  options: WaitForLogOptions = {},
): Promise<WaitForLogResult> {
  const source = logPatternSource(pattern);
  const stream =
    options.stream === "stdout"
      ? OutputStream.STDOUT
      : options.stream === "stderr"
        ? OutputStream.STDERR
        : OutputStream.UNSPECIFIED;
  return call(options.signal, async () => {
    const found = await client.waitForLog(
      {
        processId,
        pattern: source,
        stream,
        stdoutOffset: BigInt(options.fromOffsets?.stdout ?? 0),
        stderrOffset: BigInt(options.fromOffsets?.stderr ?? 0),
        timeoutMs: options.timeout ?? 0,
      },
      { signal: options.signal },
    );
    const lineOffset = Number(found.lineOffset);
    const offset = Number(found.offset);
    const result: WaitForLogResult = {
      line: found.line,
      stream: found.stream === OutputStream.STDERR ? "stderr" : "stdout",
      offset,
      lineOffset,
    };
    if (pattern instanceof RegExp) {
      const match = [found.match, ...found.groups.map((group) => group.text)] as unknown as RegExpExecArray;
      match.index = Buffer.from(found.line)
        .subarray(0, offset - lineOffset)
        .toString().length;
      match.input = found.line;
      match.groups = Object.keys(found.namedGroups).length > 0 ? { ...found.namedGroups } : undefined;
      result.match = match;
    }
    return result;
  });
}

/**
 * Waits until the process exits and resolves with its exit and record. Rejects with a
 * ProcessReadyTimeoutError on `timeout` (the process runs on).
 */
export function waitForExit(
  client: Rpc,
  processId: string,
  options: WaitForExitOptions = {},
): Promise<{ exit: ProcessExit; details?: ProcessDetails }> {
  return call(options.signal, async () => {
    const response = await client.waitForExit(
      { processId, timeoutMs: options.timeout ?? 0 },
      { signal: options.signal },
    );
    const exit = response.exited && exitFromProto(response.exited);
    if (exit === undefined) throw new SandboxError("the daemon reported an exit without a code or a signal", "NO_EXIT");
    return { exit, details: response.process && detailsFromProto(response.process) };
  });
}

/** Lists the TCP ports listening inside the sandbox, lowest first, each with the process holding it where known. */
export function listPorts(client: Rpc, options: ListPortsOptions = {}): Promise<ListeningPort[]> {
  return call(options.signal, async () => {
    const { ports } = await client.listPorts({ processId: options.processId ?? "" }, { signal: options.signal });
    return ports.map((listed) => ({
      port: listed.port,
      address: listed.address,
      ipv6: listed.ipv6,
      pid: listed.pid === 0 ? undefined : listed.pid,
      program: listed.program,
      processId: listed.processId || undefined,
    }));
  });
}
