import { ConnectError } from "@connectrpc/connect";
import { abortableDelay, linkSignals } from "../../shared/abort.js";
import type { CommandFinished } from "./command-finished.js";
import type { CommandEvent, CommandSource } from "./command-source.js";
import { SandboxError, toSandboxError } from "./errors.js";
import type { OutputOffsets } from "./output.js";
import { backoffDelay, classifyFailure, type ReconnectSettings } from "./reconnect-policy.js";

/**
 * StreamState is where a command's stream is; it is in exactly one of these, as connect-node's
 * Http2SessionManager keeps its connection's state:
 *
 * - `idle`: nobody asked to follow the command yet.
 * - `open`: a call is open; `attempt` consecutive attempts failed before it (0 once an event came).
 * - `backing-off`: the last call failed in a way worth retrying; the next opens after `delayMs`
 *   (0 after a graceful going-away).
 * - `exited`: the command's exit arrived; `finished` is the result. Final.
 * - `failed`: the stream failed for good (a lasting connection failure, the daemon's refusal, lost
 *   output, no exit). Final.
 * - `stopped`: the owner stopped following (detached, or the caller's signal aborted) with
 *   `reason`; the command itself is untouched. Final.
 */
export type StreamState =
  | { readonly t: "idle" }
  | { readonly t: "open"; readonly attempt: number }
  | { readonly t: "backing-off"; readonly attempt: number; readonly delayMs: number }
  | { readonly t: "exited"; readonly finished: CommandFinished }
  | { readonly t: "failed"; readonly error: Error }
  | { readonly t: "stopped"; readonly reason: unknown };

/** A final {@link StreamState}. */
export type SettledState = Extract<StreamState, { t: "exited" | "failed" | "stopped" }>;

/** What the stream feeds: the owner that applies events and knows where to resume. */
export interface StreamTarget {
  /** Offsets after the last byte received: where a new call starts. */
  offsets(): OutputOffsets;
  /**
   * Applies one event; resolves with the result at the exit. May wait (backpressure) until
   * `signal` aborts; a SandboxError it throws ends the stream for good.
   */
  apply(event: CommandEvent, signal: AbortSignal): Promise<CommandFinished | undefined>;
}

/**
 * CommandStream follows one command's events from a {@link CommandSource} to a
 * {@link StreamTarget} and keeps it followed: after a failure that {@link classifyFailure} calls
 * transient it opens a new call from the target's offsets once an equal-jitter backoff passed
 * ({@link backoffDelay}), at once after the daemon said it is going away, for at most
 * `maxAttempts` consecutive failures of its {@link ReconnectSettings}; never for a source that cannot resume
 * (Exec), and never after {@link refuseReconnects}. Its state is one {@link StreamState}.
 */
export class CommandStream {
  private s: StreamState = { t: "idle" };
  private following?: Promise<CommandFinished>;
  private readonly stopper = new AbortController();
  /** Whether a failed call may be followed by another; kill() ends that, the state does not. */
  private reconnects: "allowed" | "refused" = "allowed";
  private reconnected = 0;

  /** `settings` are read at each failure; `onSettle` is called once, when the stream reaches a final state. */
  constructor(
    private readonly source: CommandSource,
    private readonly target: StreamTarget,
    private readonly goAwayCount: () => number,
    private readonly settings: () => ReconnectSettings,
    private readonly onSettle: (state: SettledState) => void,
  ) {}

  /** The current state. */
  get state(): StreamState {
    return this.s;
  }

  /** How many times the stream opened a new call after a failure. */
  get reconnectCount(): number {
    return this.reconnected;
  }

  /** Starts following if nobody did yet; resolves with the result at the exit, rejects when the stream fails or stops. */
  follow(): Promise<CommandFinished> {
    if (this.following === undefined) {
      this.following = this.s.t === "stopped" ? Promise.reject(this.s.reason) : this.run();
      this.following.catch(() => {});
    }
    return this.following;
  }

  /** Resolves once the stream is in a final state (at once when it is, or was never followed and is stopped). */
  async settled(): Promise<void> {
    if (this.following !== undefined) await this.following.catch(() => {});
  }

  /** Stops following with `reason`: an open call is cancelled, a backoff ends. No-op once settled. */
  stop(reason: unknown): void {
    if (isSettled(this.s)) return;
    this.stopper.abort(reason);
    if (this.s.t === "idle") this.settle({ t: "stopped", reason });
  }

  /** Lets the next failure end the stream instead of reconnecting (a killed command is not resumed). */
  refuseReconnects(): void {
    this.reconnects = "refused";
  }

  private async run(): Promise<CommandFinished> {
    try {
      const finished = await this.pump();
      this.settle({ t: "exited", finished });
      return finished;
    } catch (error) {
      const stop = this.stopper.signal;
      if (stop.aborted) {
        this.settle({ t: "stopped", reason: stop.reason });
        throw stop.reason;
      }
      const failure = error instanceof Error ? error : toSandboxError(error);
      this.settle({ t: "failed", error: failure });
      throw failure;
    }
  }

  /** Opens calls until the exit arrives or a failure is final. */
  private async pump(): Promise<CommandFinished> {
    const stop = this.stopper.signal;
    let attempt = 0;
    for (;;) {
      if (stop.aborted) throw stop.reason;
      this.s = { t: "open", attempt };
      const goAways = this.goAwayCount();
      const call = linkSignals(stop);
      try {
        const events = this.source.open(this.target.offsets(), call.signal)[Symbol.asyncIterator]();
        for (let next = await events.next(); !next.done; next = await events.next()) {
          if (attempt > 0) this.s = { t: "open", attempt: (attempt = 0) };
          // A call cancelled by stop() can still hand over a message it had read: the owner has
          // stopped, so nothing more is applied (a reconnect() starts from offsets that hold still).
          if (stop.aborted) throw stop.reason;
          const finished = await this.target.apply(next.value, stop);
          if (finished !== undefined) {
            await readToEnd(events, call);
            return finished;
          }
        }
        throw new SandboxError("the stream ended without the command's exit", "NO_EXIT");
      } catch (error) {
        if (stop.aborted) throw stop.reason;
        attempt++;
        const delayMs = this.retryDelay(error, attempt, this.goAwayCount() !== goAways);
        this.s = { t: "backing-off", attempt, delayMs };
        await abortableDelay(delayMs, stop);
        this.reconnected++;
      } finally {
        call.abort();
      }
    }
  }

  /** How long to wait before attempt `attempt`; throws the final error when there is to be none. */
  private retryDelay(error: unknown, attempt: number, sawGoAway: boolean): number {
    // The target's own verdicts (lost output, no exit) are final.
    if (error instanceof SandboxError) throw error;
    const kind = classifyFailure(error, sawGoAway);
    if (kind === "fatal") throw toSandboxError(error);
    const cause = ConnectError.from(error);
    if (!this.source.resumable) {
      throw new SandboxError(
        "the connection to the sandbox was lost; the daemon ends an Exec command whose call is gone",
        "UNAVAILABLE",
        { cause },
      );
    }
    if (this.reconnects === "refused") throw toSandboxError(error);
    const settings = this.settings();
    if (attempt > settings.maxAttempts) {
      throw new SandboxError(`gave up after ${attempt - 1} reconnect attempts: ${cause.rawMessage}`, "UNAVAILABLE", {
        cause,
      });
    }
    return kind === "going-away" ? 0 : backoffDelay(attempt, Math.random, settings);
  }

  private settle(state: SettledState): void {
    if (isSettled(this.s)) return;
    this.s = state;
    this.onSettle(state);
  }
}

/** How long the end of a call (its trailers) may take to follow the exit before the call is cancelled. */
const endAfterExitMs = 2000;

/**
 * Reads a call to its end after the exit arrived, instead of cancelling it: a cancel is an HTTP/2
 * RST_STREAM, and the daemon's HTTP/2 layer (nghttp2) answers more than about 1,000 of them on one
 * connection, plus 33 a second, by closing the connection with INTERNAL_ERROR: a client running
 * commands one after another would lose its connection every thousand or so. The end follows the
 * exit at once (often in the same packet); past `endAfterExitMs` the call is cancelled after all.
 */
async function readToEnd(events: AsyncIterator<unknown>, call: AbortController): Promise<void> {
  const timer = setTimeout(() => call.abort(), endAfterExitMs);
  try {
    while (!(await events.next()).done) {
      // Nothing comes after the exit; anything that does is not the command's.
    }
  } catch {
    // The exit is known: how the call ends changes nothing.
  } finally {
    clearTimeout(timer);
  }
}

function isSettled(state: StreamState): state is SettledState {
  return state.t === "exited" || state.t === "failed" || state.t === "stopped";
}
