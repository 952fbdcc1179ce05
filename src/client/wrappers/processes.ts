import { Code, ConnectError } from "@connectrpc/connect";
import type { ProcessInfo, ProcessStatus as ProtoStatus } from "../../../gen/sandbox/v1/sandbox_pb.js";
import {
  chunkFromProto,
  checkOptions,
  optionNames,
  type CommandOptions,
  toSandboxError,
  launch,
  type LaunchContext,
  StreamDecoder,
  type OutputOffsets,
  ProcessHandle,
  type ProcessLogs,
  readProcessLogs,
  exitCodeOf,
} from "../core/index.js";
import { baseExecOptionNames, fromBaseExecOptions, type BaseExecOptions } from "./exec.js";
import { processStatusToProto, type ProcessStatus } from "../../shared/process-status.js";
import { logEvents, type LogEvent, type Process } from "./process-views.js";

/** What the process calls need from a running sandbox besides launching commands. */
export interface ProcessesContext extends LaunchContext {
  /** The sessions of the sandbox's commands. */
  sessions(): readonly string[];
}

/**
 * Options of `startProcess()`, as the Cloudflare Sandbox SDK's `ProcessOptions`, plus argv form,
 * PTY, stdin, sudo and how much output the handle keeps.
 */
export interface ProcessOptions
  extends BaseExecOptions,
    Pick<CommandOptions, "processId" | "autoCleanup" | "stdin" | "maxRetainedBytes"> {
  /** The process exited; `code` as in CommandFinished.exitCode. Giving it makes the handle follow the process. */
  onExit?: CommandOptions["onExit"];
  /** Text as it arrives. Giving it makes the handle follow the process. */
  onOutput?: CommandOptions["onOutput"];
  /** The process started (called before startProcess resolves). */
  onStart?: (process: Process) => void;
  /** Following the process failed for good. Giving it makes the handle follow the process. */
  onError?: CommandOptions["onError"];
}

/** Options of `listProcesses()`. */
export interface ListProcessesOptions {
  /**
   * All: every process the daemon keeps, of every session, instead of only this sandbox's sessions
   * (exited ones are listed either way unless `statuses` says otherwise), as `all` means in the
   * Python client and `sandbox ps -a`.
   */
  all?: boolean;
  /** Only processes in one of these statuses. */
  statuses?: readonly ProcessStatus[];
}

const processOptionNames = optionNames<ProcessOptions>({
  ...baseExecOptionNames,
  processId: true,
  autoCleanup: true,
  stdin: true,
  maxRetainedBytes: true,
  onExit: true,
  onOutput: true,
  onStart: true,
  onError: true,
});

/**
 * Starts a background process, as the Cloudflare Sandbox SDK's `startProcess()`, and resolves
 * with its {@link ProcessHandle} (that SDK's `Process`, and a live handle). Giving `onOutput`,
 * `onExit` or `onError` makes the handle follow the process at once; otherwise it follows when
 * first iterated or waited on. A live duplicate `processId` is a ProcessAlreadyExistsError.
 */
export async function startProcess(
  context: LaunchContext,
  command: string,
  options: ProcessOptions = {},
): Promise<ProcessHandle> {
  checkOptions(options, processOptionNames, "startProcess");
  const { onStart, ...rest } = options;
  const handle = await launch(context, command, fromBaseExecOptions(rest), "background");
  onStart?.(handle);
  return handle;
}

/** Lists processes (as handles), oldest first: the sandbox's sessions, or every process with `all`; every page of them. */
export async function listProcesses(
  context: ProcessesContext,
  options: ListProcessesOptions = {},
): Promise<ProcessHandle[]> {
  const statuses = (options.statuses ?? []).map(processStatusToProto);
  const sessions = options.all === true ? [""] : context.sessions();
  const lists = await Promise.all(sessions.map((sessionId) => listAllPages(context, { sessionId, statuses })));
  return lists
    .flat()
    .map((info) => ProcessHandle.forProcess(context, info, { encoding: context.defaults.encoding }))
    .sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
}

/** Every record ListProcesses gives for a filter, page after page. */
async function listAllPages(
  context: LaunchContext,
  filter: { sessionId: string; statuses: ProtoStatus[] },
): Promise<ProcessInfo[]> {
  const records: ProcessInfo[] = [];
  let pageToken = "";
  do {
    const page = await context.client.listProcesses({ ...filter, pageToken });
    records.push(...page.processes);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return records;
}

/** A handle of any process on the daemon by id, or null when the daemon has no record of it. */
export async function getProcess(context: LaunchContext, id: string): Promise<ProcessHandle | null> {
  try {
    const { process } = await context.client.getProcess({ processId: id });
    return context.track(ProcessHandle.forProcess(context, process!, { encoding: context.defaults.encoding }));
  } catch (error) {
    if (ConnectError.from(error).code === Code.NotFound) return null;
    throw toSandboxError(error);
  }
}

/**
 * A handle of a process whose stream starts at `from` (by default everything the daemon retains):
 * to resume a process this client (or another) was following. ProcessNotFoundError when unknown.
 */
export async function attach(context: LaunchContext, id: string, from?: OutputOffsets): Promise<ProcessHandle> {
  try {
    const { process } = await context.client.getProcess({ processId: id });
    return context.track(ProcessHandle.forProcess(context, process!, { from, encoding: context.defaults.encoding }));
  } catch (error) {
    throw toSandboxError(error);
  }
}

/** Signals a process's group (SIGTERM by default; SIGKILL after 5 s if still alive). ProcessNotFoundError when unknown. */
export async function killProcess(context: LaunchContext, id: string, signal = "SIGTERM"): Promise<void> {
  try {
    await context.client.killProcess({ processId: id, signal });
  } catch (error) {
    throw toSandboxError(error);
  }
}

/** Signals every live process of the sandbox's sessions (SIGTERM, SIGKILL after 5 s); resolves with how many. */
export async function killAllProcesses(context: ProcessesContext, signal = "SIGTERM"): Promise<number> {
  const counts = await Promise.all(
    context.sessions().map((sessionId) => context.client.killAllProcesses({ sessionId, signal })),
  );
  return counts.reduce((sum, response) => sum + response.killedCount, 0);
}

/** Removes the records of exited processes of the sandbox's sessions; resolves with how many. */
export async function cleanupCompletedProcesses(context: ProcessesContext): Promise<number> {
  const counts = await Promise.all(
    context.sessions().map((sessionId) => context.client.cleanupProcesses({ sessionId })),
  );
  return counts.reduce((sum, response) => sum + response.removedCount, 0);
}

/**
 * The output a process's record retains, as text: one GetProcessLogs call. Each stream is its head
 * and its tail; `dropped` names the gap between them, if any. ProcessNotFoundError when unknown.
 */
export async function getProcessLogs(context: LaunchContext, id: string): Promise<ProcessLogs & { processId: string }> {
  return { ...(await readProcessLogs(context, id, context.defaults.encoding)), processId: id };
}

/**
 * What a process printed so far, both streams joined in arrival order, and its exit code once it
 * has exited, as the Together sandbox SDK's `getOutput()`: a snapshot that never waits or throws
 * for a missing exit (one StreamLogs call without `follow`). Only what the daemon still retains
 * is there. ProcessNotFoundError when unknown.
 */
export async function getOutput(context: LaunchContext, id: string): Promise<{ exitCode?: number; output: string }> {
  const decoder = new StreamDecoder(context.defaults.encoding);
  const parts: string[] = [];
  let exitCode: number | undefined;
  try {
    for await (const { event } of context.client.streamLogs({ processId: id, follow: false })) {
      if (event.case === "output") {
        const chunk = chunkFromProto(event.value);
        parts.push(decoder.decode(chunk.stream, chunk.data));
      } else if (event.case === "exited") exitCode = exitCodeOf(event.value);
    }
  } catch (error) {
    throw toSandboxError(error);
  }
  parts.push(decoder.flush("stdout"), decoder.flush("stderr"));
  return { exitCode, output: parts.join("") };
}

/**
 * Follows a process's output as {@link LogEvent}s until it exits, as the Cloudflare Sandbox SDK's
 * `streamProcessLogs()`, from everything the daemon retains, reconnecting on transient failures.
 * Ends when `signal` aborts.
 */
export async function* streamProcessLogs(
  context: LaunchContext,
  processId: string,
  options: { signal?: AbortSignal } = {},
): AsyncGenerator<LogEvent> {
  const handle = await attach(context, processId);
  yield* logEvents(handle, context.defaults.encoding, options.signal);
}
