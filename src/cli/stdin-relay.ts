import type { Readable } from "node:stream";

/** Where relayed input goes: the input side of a command handle. */
export interface InputTarget {
  /** Writes bytes to the command's stdin or terminal; resolves once the daemon acknowledged them. */
  sendInput(data: Uint8Array): Promise<unknown>;
  /** Closes the command's stdin (end of input; ^D to a terminal). */
  closeInput(): Promise<unknown>;
}

/** Options of a {@link StdinRelay}. */
export interface StdinRelayOptions {
  /** Pass the end of the local input on by closing the command's stdin. */
  closeAtEnd: boolean;
  /**
   * A key sequence that, typed in a row, detaches instead of being sent (docker's Ctrl-P Ctrl-Q).
   * Bytes that start the sequence are held back until it is complete or broken.
   */
  detachKeys?: Uint8Array;
  /** Called once when the detach keys were typed. */
  onDetach?: () => void;
  /** Called once when input could not be delivered (the command exited or closed its stdin); relaying stops. */
  onError?: (error: unknown) => void;
}

/** Bytes in flight to the daemon beyond which the local input is paused, so a fast producer does not fill memory. */
const maxBytesInFlight = 1024 * 1024;

/**
 * StdinRelay passes a local input stream (this process's stdin, a pipe or a terminal) to a remote
 * command as it arrives, in order, pausing the local stream while too much is unacknowledged.
 * `done` resolves once the input ended and was passed on (or relaying stopped).
 */
export class StdinRelay {
  /** Resolves when relaying is over: the input ended and was delivered, it failed, or stop() was called. */
  readonly done: Promise<void>;
  private finish!: () => void;
  private state: { kind: "relaying"; inFlightBytes: number; held: number } | { kind: "stopped" } = { kind: "relaying", inFlightBytes: 0, held: 0 };
  private sends: Promise<void> = Promise.resolve();

  constructor(
    private readonly input: Readable,
    private readonly target: InputTarget,
    private readonly options: StdinRelayOptions,
  ) {
    this.done = new Promise((resolve) => (this.finish = resolve));
    input.on("data", this.received);
    input.once("end", this.ended);
    input.once("error", this.failed);
    input.resume();
  }

  /** Stops reading the local input (the command keeps its stdin as it is). */
  stop(): void {
    if (this.state.kind === "stopped") return;
    this.state = { kind: "stopped" };
    this.input.off("data", this.received);
    this.input.off("end", this.ended);
    this.input.off("error", this.failed);
    this.input.pause();
    this.finish();
  }

  private readonly received = (chunk: Buffer | string) => {
    if (this.state.kind !== "relaying") return;
    let data: Uint8Array = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    if (this.options.detachKeys !== undefined) {
      const scanned = this.scanForDetach(data);
      if (scanned === "detach") {
        this.stop();
        this.options.onDetach?.();
        return;
      }
      data = scanned;
    }
    if (data.length > 0) this.send(data);
  };

  private readonly ended = () => {
    if (this.state.kind !== "relaying") return;
    const closeAtEnd = this.options.closeAtEnd;
    // The end of input goes after every byte before it was acknowledged.
    void this.track(this.sends.then(async () => {
      if (closeAtEnd && this.state.kind === "relaying") await this.target.closeInput();
    })).then(() => this.stop());
  };

  private readonly failed = (error: unknown) => {
    if (this.state.kind === "stopped") return;
    this.stop();
    this.options.onError?.(error);
  };

  private send(data: Uint8Array): void {
    if (this.state.kind !== "relaying") return;
    const state = this.state;
    state.inFlightBytes += data.length;
    if (state.inFlightBytes > maxBytesInFlight) this.input.pause();
    // Sent at once: messages share one ordered input stream, so several may be in flight.
    const sent = this.target.sendInput(data).finally(() => {
      state.inFlightBytes -= data.length;
      if (this.state.kind === "relaying" && state.inFlightBytes <= maxBytesInFlight) this.input.resume();
    });
    this.track(sent);
  }

  /** Adds `step` to what `done` waits for; its failure stops the relay and is reported once. */
  private track(step: Promise<unknown>): Promise<void> {
    const settled = step.then(
      () => {},
      (error: unknown) => this.failed(error),
    );
    const previous = this.sends;
    this.sends = previous.then(() => settled);
    return settled;
  }

  /** Removes a complete detach sequence (reporting it) or holds back a partial one at the end of `data`. */
  private scanForDetach(data: Uint8Array): Uint8Array | "detach" {
    const keys = this.options.detachKeys!;
    const state = this.state as { held: number };
    const combined = state.held > 0 ? Buffer.concat([keys.subarray(0, state.held), data]) : Buffer.from(data);
    state.held = 0;
    for (let index = 0; index < combined.length; index++) {
      let matched = 0;
      while (matched < keys.length && index + matched < combined.length && combined[index + matched] === keys[matched]) matched++;
      if (matched === keys.length) return "detach";
      if (matched > 0 && index + matched === combined.length) {
        state.held = matched;
        return combined.subarray(0, index);
      }
    }
    return combined;
  }
}
