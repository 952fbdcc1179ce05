import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { SandboxService, SendInputRequestSchema, SendInputResponse } from "../../../gen/sandbox/v1/sandbox_pb.js";
import { SandboxError, toSandboxError } from "./errors.js";

type InputMessage = MessageInitShape<typeof SendInputRequestSchema>;

/** The acknowledgement of one input message. */
export interface InputAck {
  /** Total bytes written to the process's stdin so far, by all writers. */
  bytesWritten: number;
  /** Whether stdin is now closed. */
  closed: boolean;
}

/**
 * InputStream is one SendInput call to one process, opened on the first message: data, end of input,
 * PTY resizes and signals go over it in order, and each `send` resolves with that message's
 * acknowledgement. A failed call is not retried (the daemon may or may not have applied the message
 * in flight, and writing it twice would duplicate input); the next `send` opens a new call.
 */
export class InputStream {
  /** The call being opened or open; kept as a promise so concurrent sends share one call, in order. */
  private call?: Promise<OpenCall>;

  constructor(
    private readonly client: Client<typeof SandboxService>,
    private readonly processId: string,
  ) {}

  /** Sends one message and resolves with its acknowledgement; rejects with a SandboxError. */
  async send(input: InputMessage["input"]): Promise<InputAck> {
    const call = await this.current();
    return call.send({ input });
  }

  /** Ends the call, even one still opening (not the process's stdin: that is `send({ case: "close" })`). */
  close(): void {
    const call = this.call;
    this.call = undefined;
    call?.then(
      (open) => open.end(),
      () => {},
    );
  }

  /** The open call, opening one when there is none or the last one failed. */
  private async current(): Promise<OpenCall> {
    const opening = (this.call ??= this.open());
    let call = await this.settle(opening);
    if (call.failed) {
      // One new call at most; a message in flight on the failed one is never written twice.
      if (this.call === opening) this.call = undefined;
      call = await this.settle((this.call ??= this.open()));
    }
    return call;
  }

  /** Awaits `opening`; a call that failed to open is forgotten, so the next send opens another. */
  private async settle(opening: Promise<OpenCall>): Promise<OpenCall> {
    try {
      return await opening;
    } catch (error) {
      if (this.call === opening) this.call = undefined;
      throw error;
    }
  }

  private async open(): Promise<OpenCall> {
    const call = new OpenCall(this.client);
    try {
      await call.send({ input: { case: "open", value: { processId: this.processId } } });
    } catch (error) {
      call.end();
      throw error;
    }
    return call;
  }
}

/**
 * One SendInput call: a queue of requests and the acknowledgements awaited in order. It is `open`,
 * then `ended` by its owner (no more requests) or `failed` (the call is over); either is final.
 */
class OpenCall {
  private state: "open" | "ended" | "failed" = "open";
  private readonly queue: InputMessage[] = [];
  private readonly waiting: Array<{ resolve(ack: InputAck): void; reject(error: unknown): void }> = [];
  private wake?: () => void;
  private readonly abort = new AbortController();

  constructor(client: Client<typeof SandboxService>) {
    void this.read(client.sendInput(this.requests(), { signal: this.abort.signal }));
  }

  /** Whether the call is over: a new one is needed for more input. */
  get failed(): boolean {
    return this.state === "failed";
  }

  send(message: InputMessage): Promise<InputAck> {
    if (this.state !== "open") return Promise.reject(new SandboxError("the input stream is closed", "INPUT_CLOSED"));
    return new Promise<InputAck>((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.queue.push(message);
      this.wake?.();
    });
  }

  end(): void {
    if (this.state === "open") this.state = "ended";
    this.wake?.();
    // Acks still owed are not awaited by anyone once the owner lets go.
    if (this.waiting.length === 0) return;
    this.abort.abort();
  }

  private async *requests(): AsyncGenerator<InputMessage> {
    for (;;) {
      const next = this.queue.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (this.state !== "open") return;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }

  private async read(responses: AsyncIterable<SendInputResponse>): Promise<void> {
    try {
      for await (const response of responses) {
        this.waiting.shift()?.resolve({ bytesWritten: Number(response.bytesWritten), closed: response.closed });
      }
      if (this.waiting.length > 0)
        throw new SandboxError("the input stream ended before acknowledging every message", "INPUT_CLOSED");
    } catch (error) {
      const failure = toSandboxError(error);
      for (const waiter of this.waiting.splice(0)) waiter.reject(failure);
    } finally {
      this.state = "failed";
      this.wake?.();
    }
  }
}
