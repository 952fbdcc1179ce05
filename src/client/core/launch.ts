import { toProcessSpec, type CommandDefaults, type CommandOptions } from "./command-options.js";
import { toSandboxError } from "./errors.js";
import { ProcessHandle, type CommandContext, type HandleClass, type HandleOptions } from "./process-handle.js";

/** What running a command needs from a running sandbox. */
export interface LaunchContext extends CommandContext {
  /** What the sandbox adds to every command. */
  readonly defaults: CommandDefaults;
  /** Notes a session the sandbox's commands use, so stop() and close() reach it. */
  useSession(sessionId: string): void;
  /** Keeps a handle of a background command, so stop() and close() detach it. */
  track<H extends ProcessHandle>(handle: H): H;
}

/**
 * How a command runs. `wait`: through Exec, one call that streams the command from start to exit;
 * the daemon kills the command when the call goes away (cancelled, or this client gone), and the
 * result keeps all output. `stream`: as `wait`, for a caller that iterates the handle at once: its
 * first iterator is subscribed before any output arrives, so a handle that keeps nothing for its
 * result (`maxRetainedBytes` 0) still hands every byte to it. `background`: StartProcess, then
 * StreamLogs to follow it; the command outlives its calls and its handle can reconnect.
 */
export type LaunchMode = "wait" | "stream" | "background";

/**
 * Runs `command`: the one way every API of this client starts a command. `wait` resolves once the
 * daemon reports the command started, with a handle already following it; `background` resolves
 * with the handle (of class `Handle`) once the daemon has the process, following it only when
 * asked or when a callback is given. Rejects with a SandboxError when the daemon refuses, and with
 * the signal's reason when `signal` aborts first.
 */
export async function launch<H extends ProcessHandle = ProcessHandle>(
  context: LaunchContext,
  command: string,
  options: CommandOptions,
  mode: LaunchMode,
  Handle: HandleClass<H> = ProcessHandle as unknown as HandleClass<H>,
): Promise<H> {
  const { defaults } = context;
  const waiting = mode !== "background";
  const timeoutMs = options.timeoutMs ?? (waiting ? defaults.timeoutMs : 0);
  const spec = toProcessSpec(command, { ...options, timeoutMs }, defaults);
  context.useSession(spec.sessionId!);
  const handleOptions: HandleOptions = {
    encoding: options.encoding ?? defaults.encoding,
    maxRetainedBytes: options.maxRetainedBytes,
    onOutput: options.onOutput,
    onExit: options.onExit,
    onError: options.onError,
  };
  const { signal } = options;
  if (waiting) {
    try {
      return (await ProcessHandle.exec(
        context,
        { spec },
        { ...handleOptions, signal, iterated: mode === "stream" },
      )) as H;
    } catch (error) {
      throw signal?.aborted ? signal.reason : toSandboxError(error);
    }
  }
  if (signal?.aborted) throw signal.reason;
  let started;
  try {
    // Not cancelled by the signal: a process the daemon started anyway would be left running.
    // killOnAbort below kills it instead, at once when the signal aborted meanwhile.
    started = await context.client.startProcess({ spec });
  } catch (error) {
    throw toSandboxError(error);
  }
  const handle = context.track(Handle.forProcess(context, started.process!, handleOptions));
  if (signal !== undefined) handle.killOnAbort(signal);
  if (options.onOutput !== undefined || options.onExit !== undefined || options.onError !== undefined)
    void handle.follow();
  return handle;
}
