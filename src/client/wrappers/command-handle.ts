import {
  defaultReconnectSettings,
  type InputAck,
  type KillOptions,
  ProcessHandle,
  type ReconnectSettings,
} from "../core/index.js";

/**
 * CommandHandle mirrors the LangSmith sandbox SDK's `CommandHandle`: what `sandbox.run(command,
 * { wait: false })` resolves with. It is a {@link ProcessHandle} (async-iterable output chunks,
 * `result`, `sendInput()`, `lastStdoutOffset`/`lastStderrOffset`, `reconnect()`, `commandId`,
 * `pid`) whose `kill()` sends SIGKILL by default, as that API's does.
 *
 * Auto-reconnect behaves as that API documents: after the daemon goes away for a restart (its
 * "1001 Going Away": the SHUTTING_DOWN reason, or a graceful HTTP/2 GOAWAY) the handle reconnects
 * at once; after a network error or an unexpected close it backs off exponentially from
 * `BACKOFF_BASE` milliseconds up to `BACKOFF_MAX`, with jitter, for at most `MAX_AUTO_RECONNECTS`
 * consecutive failures; after `kill()` it does not reconnect. The three statics are that API's
 * class-wide settings: they apply to CommandHandles (not to the other APIs' handles), and a
 * sandbox's own `reconnect` option, where it sets one, takes precedence for that sandbox's handles.
 */
export class CommandHandle extends ProcessHandle {
  /** Consecutive failed reconnect attempts before a CommandHandle gives up (default 5). */
  static MAX_AUTO_RECONNECTS: number = defaultReconnectSettings.maxAttempts;

  /** Ceiling of a CommandHandle's first backoff in milliseconds, doubled on each consecutive failure (default 500). */
  static BACKOFF_BASE: number = defaultReconnectSettings.backoffBaseMs;

  /** Largest backoff ceiling of a CommandHandle in milliseconds (default 10000). */
  static BACKOFF_MAX: number = defaultReconnectSettings.backoffMaxMs;

  /** The class's statics, in place of the defaults under a sandbox's own `reconnect` option. */
  static override reconnectDefaults(): ReconnectSettings {
    return {
      maxAttempts: CommandHandle.MAX_AUTO_RECONNECTS,
      backoffBaseMs: CommandHandle.BACKOFF_BASE,
      backoffMaxMs: CommandHandle.BACKOFF_MAX,
    };
  }

  /**
   * Sends `signal` to the command's whole process group: SIGKILL by default, as LangSmith's
   * `CommandHandle.kill()` does. The stream then ends with the exit; the handle does not reconnect.
   * That API's kill() returns nothing, so this may be called without awaiting it: a failure then
   * goes unreported instead of becoming an unhandled rejection.
   */
  override kill(signal = "SIGKILL", options: KillOptions = {}): Promise<void> {
    return handled(super.kill(signal, options));
  }

  /**
   * Writes `data` to the command's stdin (see {@link ProcessHandle.sendInput}). Like kill(), it
   * may be called without awaiting it, as LangSmith's `sendInput()` returns nothing.
   */
  override sendInput(data: string | Uint8Array): Promise<InputAck> {
    return handled(super.sendInput(data));
  }
}

/** `promise`, with a rejection handler attached so that not awaiting it is not an unhandled rejection. */
function handled<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}
