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
 * It stops at the end of the input (after passing it on), at a failure, at the detach keys, or at stop().
 */
export class StdinRelay {
  private state: { kind: "relaying"; inFlightBytes: number } | { kind: "stopped" } = {
    kind: "relaying",
    inFlightBytes: 0,
  };
  /** Sends and the end of input in flight, chained in order. */
  private sends: Promise<void> = Promise.resolve();
  /** How many bytes of the detach keys the last chunk ended with (held back until the next one). */
  private heldKeys = 0;

  constructor(
    private readonly input: Readable,
    private readonly target: InputTarget,
    private readonly options: StdinRelayOptions,
  ) {
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
  }

  private readonly received = (chunk: Buffer | string) => {
    if (this.state.kind !== "relaying") return;
    const data: Uint8Array = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    if (this.options.detachKeys === undefined) {
      this.send(data);
      return;
    }
    const scanned = this.scanForDetach(data);
    if (scanned.data.length > 0) this.send(scanned.data);
    if (scanned.detach) {
      this.stop();
      this.options.onDetach?.();
    }
  };

  private readonly ended = () => {
    if (this.state.kind !== "relaying") return;
    const closeAtEnd = this.options.closeAtEnd;
    // The end of input goes after every byte before it was acknowledged.
    void this.track(
      this.sends.then(async () => {
        if (closeAtEnd && this.state.kind === "relaying") await this.target.closeInput();
      }),
    ).then(() => this.stop());
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

  /**
   * Splits `data` (after any held key bytes) at the detach keys: the bytes before them, and whether
   * they were typed. A chunk that ends with the start of the keys holds those bytes back.
   */
  private scanForDetach(data: Uint8Array): { data: Uint8Array; detach: boolean } {
    const keys = this.options.detachKeys!;
    const combined = this.heldKeys > 0 ? Buffer.concat([keys.subarray(0, this.heldKeys), data]) : Buffer.from(data);
    this.heldKeys = 0;
    for (let index = 0; index < combined.length; index++) {
      let matched = 0;
      while (matched < keys.length && index + matched < combined.length && combined[index + matched] === keys[matched])
        matched++;
      if (matched === keys.length) return { data: combined.subarray(0, index), detach: true };
      if (matched > 0 && index + matched === combined.length) {
        this.heldKeys = matched;
        return { data: combined.subarray(0, index), detach: false };
      }
    }
    return { data: combined, detach: false };
  }
}
