import { joinBytes, type OutputChunk, type OutputGap, type OutputOffsets, type OutputStreamName } from "./output.js";
import { decodeChunks, StreamDecoder, type DecodedOutput } from "./stream-decoder.js";
import type { ProcessExit } from "./process-record.js";
import type { ProcessStatus } from "../../shared/process-status.js";
import type { ExitCause } from "../../shared/exit-cause.js";

/**
 * CommandFinished is a command that has exited, with everything it printed, as Vercel Sandbox's
 * `CommandFinished`: what a handle's `wait()` (and `result`), a blocking `runCommand()` and a
 * waiting `run()` resolve with.
 *
 * `exitCode` is always a number: the process's own exit code, or 128 + the signal number when a
 * signal ended it (137 for SIGKILL, as a timeout reports it), with `signal` naming the signal.
 * Text accessors decode with the handle's encoding (UTF-8 by default), each stream with its own
 * incremental decoder, so multi-byte characters are never split.
 *
 * The output is everything the handle received unless its `maxRetainedBytes` (by default 16 MiB
 * for a background process, unlimited for Exec) made it drop the oldest chunks: then `truncated` is
 * true, `droppedBytes` says how many bytes of each stream are missing from the front, `dropped`
 * says where (stream, offset, length), and the text of a stream may begin with U+FFFD where a
 * character was cut. An Exec hands every byte to the client, so only the client drops; what the
 * daemon's record of the process kept (its head and tail) is `exit.dropped`.
 */
export class CommandFinished {
  private decoded?: DecodedOutput;
  /** Every chunk retained, in arrival order (see `truncated`): views of {@link bytes}. */
  readonly chunks: readonly OutputChunk[];
  /** Each stream's retained bytes, joined once. */
  private readonly bytes: Readonly<Record<OutputStreamName, Buffer>>;

  /**
   * @internal Built by a handle from its exit and the chunks it retained. Each stream's chunks are
   * joined into one buffer here and `chunks` become views of it, so the result holds its output
   * once, however the bytes and text are read, and lets go of the buffers they arrived in.
   */
  constructor(
    /** The process id. */
    readonly id: string,
    /** The command as given. */
    readonly command: string,
    /** How it ended. */
    readonly exit: ProcessExit,
    received: readonly OutputChunk[],
    /** Encoding of the text accessors (a WHATWG label). */
    readonly encoding = "utf-8",
    /** Bytes of each stream dropped from the front because of the handle's `maxRetainedBytes`. */
    readonly droppedBytes: Readonly<OutputOffsets> = { stdout: 0, stderr: 0 },
    /** What this result lacks, where: the ranges `droppedBytes` counts, stdout's first. */
    readonly dropped: readonly OutputGap[] = [],
  ) {
    const stdout = asBuffer(joinBytes(received, "stdout"));
    const stderr = asBuffer(joinBytes(received, "stderr"));
    this.bytes = { stdout, stderr };
    const at = { stdout: 0, stderr: 0 };
    this.chunks = received.map((chunk) => {
      const start = at[chunk.stream];
      at[chunk.stream] += chunk.data.length;
      return {
        stream: chunk.stream,
        offset: chunk.offset,
        data: this.bytes[chunk.stream].subarray(start, at[chunk.stream]),
      };
    });
  }

  /** Whether older output was dropped to respect the handle's `maxRetainedBytes` (see `droppedBytes`). */
  get truncated(): boolean {
    return this.droppedBytes.stdout > 0 || this.droppedBytes.stderr > 0;
  }

  /** The exit code; 128 + the signal number when a signal ended the process. */
  get exitCode(): number {
    return this.exit.exitCode;
  }

  /** Final status: completed, failed, killed or error. */
  get status(): ProcessStatus {
    return this.exit.status;
  }

  /** Name of the signal that ended the process (`"SIGKILL"`), undefined when it exited. */
  get signal(): string | undefined {
    return this.exit.signal;
  }

  /** Whether the process was killed because its timeout expired. */
  get timedOut(): boolean {
    return this.exit.timedOut;
  }

  /**
   * Why the process ended (`exited`, `signaled`, `killed_on_request`, `timed_out`,
   * `out_of_memory`, `daemon_shutdown`, `start_failed`, `unknown`); `exit` has its detail.
   */
  get cause(): ExitCause {
    return this.exit.cause;
  }

  /** Whether exitCode is 0. */
  get success(): boolean {
    return this.exit.exitCode === 0;
  }

  /** Standard output as text. */
  stdout(): string {
    return this.text().stdout;
  }

  /** Standard error as text. */
  stderr(): string {
    return this.text().stderr;
  }

  /** Both streams' text joined in the order the chunks arrived. */
  output(): string {
    return this.text().output;
  }

  /** Standard output bytes, exactly as written (the result's own buffer: the same one each call). */
  stdoutBytes(): Buffer {
    return this.bytes.stdout;
  }

  /** Standard error bytes, exactly as written (the result's own buffer: the same one each call). */
  stderrBytes(): Buffer {
    return this.bytes.stderr;
  }

  private text(): DecodedOutput {
    this.decoded ??= this.decode();
    return this.decoded;
  }

  /**
   * Decodes each stream's bytes in one pass. When only one stream has output, `output` is the same
   * string as that stream's text (no second copy); only output of both streams is decoded again,
   * chunk by chunk, for the joined text in arrival order.
   */
  private decode(): DecodedOutput {
    const text = (stream: OutputStreamName) => {
      const decoder = new StreamDecoder(this.encoding);
      return decoder.decode(stream, this.bytes[stream]) + decoder.flush(stream);
    };
    const stdout = text("stdout");
    const stderr = text("stderr");
    if (this.bytes.stderr.length === 0) return { stdout, stderr, output: stdout };
    if (this.bytes.stdout.length === 0) return { stdout, stderr, output: stderr };
    return { stdout, stderr, output: decodeChunks(this.chunks, this.encoding).output };
  }
}

/** A Buffer over the same memory as `bytes`. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
