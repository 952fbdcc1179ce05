import type { Writable } from "node:stream";
import type { OutputStreamName } from "../../client/index.js";

/** BrokenPipeError says the reader of this process's stdout or stderr went away (EPIPE), as `| head` does. */
export class BrokenPipeError extends Error {
  constructor(
    readonly stream: OutputStreamName,
    options?: { cause?: unknown },
  ) {
    super(`${stream} was closed by its reader`, options);
    this.name = "BrokenPipeError";
  }
}

/**
 * LocalOutput writes a remote command's bytes to this process's stdout and stderr exactly as they
 * came. A write waits while the stream is full, so a slow reader slows the relay (and, through
 * HTTP/2 flow control, the command) instead of filling memory; a reader that went away makes writes
 * reject with a {@link BrokenPipeError}.
 */
export class LocalOutput {
  private readonly streams: Record<OutputStreamName, Writable>;
  private readonly failures: Partial<Record<OutputStreamName, Error>> = {};

  constructor(stdout: Writable = process.stdout, stderr: Writable = process.stderr) {
    this.streams = { stdout, stderr };
    for (const name of ["stdout", "stderr"] as const) {
      // Without a listener an EPIPE would be an uncaught error; it is reported by the next write instead.
      this.streams[name].on("error", (error: NodeJS.ErrnoException) => {
        this.failures[name] ??= error.code === "EPIPE" ? new BrokenPipeError(name, { cause: error }) : error;
      });
    }
  }

  /** Whether the reader of stdout or stderr went away (EPIPE) at some point. */
  get brokenPipe(): boolean {
    return Object.values(this.failures).some((failure) => failure instanceof BrokenPipeError);
  }

  /** Writes `data` to `stream` and resolves once the stream can take more. */
  async write(stream: OutputStreamName, data: Uint8Array): Promise<void> {
    const target = this.streams[stream];
    const failed = this.failures[stream];
    if (failed !== undefined) throw failed;
    if (target.write(data)) return;
    await new Promise<void>((resolve, reject) => {
      const done = (error?: Error) => {
        target.off("drain", drained);
        target.off("error", errored);
        target.off("close", closed);
        if (error === undefined) resolve();
        else reject(this.failures[stream] ?? error);
      };
      const drained = () => done();
      const errored = (error: Error) => done(error);
      const closed = () => done(new BrokenPipeError(stream));
      target.on("drain", drained);
      target.on("error", errored);
      target.on("close", closed);
    });
  }
}

/** Resolves once everything written to `stream` so far has been handed to the system. */
export function flushed(stream: Writable): Promise<void> {
  if (stream.destroyed || stream.writableEnded) return Promise.resolve();
  return new Promise((resolve) => stream.write("", () => resolve()));
}
