import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import {
  OutputStream,
  type ExecRequestSchema,
  type OutputChunk as ProtoChunk,
  type ProcessExited,
  type ProcessInfo,
  type SandboxService,
} from "../../../gen/sandbox/v1/sandbox_pb.js";
import { SandboxError } from "./errors.js";
import type { OutputChunk, OutputOffsets, OutputStreamName } from "./output.js";

/** CommandEvent is one event of a command's stream, the same whether it came from Exec or StreamLogs. */
export type CommandEvent =
  | { kind: "process"; info: ProcessInfo }
  | { kind: "output"; chunk: OutputChunk }
  | { kind: "gap"; stream: OutputStreamName; offset: number; missedBytes: number }
  | { kind: "exited"; exited: ProcessExited }
  | { kind: "caught-up" };

/**
 * CommandSource opens a command's event stream. A resumable source (StreamLogs of a background
 * process) can be opened again from any offsets after a failure; an Exec source can be opened once,
 * because the daemon kills an Exec command whose call is gone.
 */
export interface CommandSource {
  /** Whether {@link open} may be called again after a failure. */
  readonly resumable: boolean;
  /** Opens the stream from the given offsets; aborting `signal` cancels the call. */
  open(from: OutputOffsets, signal: AbortSignal): AsyncIterable<CommandEvent>;
}

/** Creates the source of a new command run by Exec: `process` first, output, `exited` last. */
export function createExecSource(
  client: Client<typeof SandboxService>,
  request: MessageInitShape<typeof ExecRequestSchema>,
): CommandSource {
  let opened = false;
  return {
    resumable: false,
    async *open(_from, signal) {
      if (opened)
        throw new SandboxError(
          "an Exec stream cannot be reopened: the daemon ends its command with the call",
          "NOT_RESUMABLE",
        );
      opened = true;
      for await (const response of client.exec(request, { signal })) {
        const event = response.event;
        if (event.case === "started") yield { kind: "process", info: event.value };
        else if (event.case === "output") yield { kind: "output", chunk: chunkFromProto(event.value) };
        else if (event.case === "exited") yield { kind: "exited", exited: event.value };
      }
    },
  };
}

/**
 * Creates the source of a process's output through StreamLogs with `follow`: `process` first, then
 * output from the offsets (or a gap where output is no longer retained), `exited` last.
 */
export function createLogsSource(client: Client<typeof SandboxService>, processId: string): CommandSource {
  return {
    resumable: true,
    async *open(from, signal) {
      const request = { processId, stdoutOffset: BigInt(from.stdout), stderrOffset: BigInt(from.stderr), follow: true };
      for await (const response of client.streamLogs(request, { signal })) {
        const event = response.event;
        switch (event.case) {
          case "process":
            yield { kind: "process", info: event.value };
            break;
          case "output":
            yield { kind: "output", chunk: chunkFromProto(event.value) };
            break;
          case "gap":
            yield {
              kind: "gap",
              stream: streamName(event.value.stream),
              offset: Number(event.value.offset),
              missedBytes: Number(event.value.missedBytes),
            };
            break;
          case "exited":
            yield { kind: "exited", exited: event.value };
            break;
          case "caughtUp":
            yield { kind: "caught-up" };
            break;
        }
      }
    },
  };
}

/** Converts an output chunk message. */
export function chunkFromProto(chunk: ProtoChunk): OutputChunk {
  // A Buffer over the same memory (no copy): its toString() is the text, so `${chunk.data}` prints it.
  const data = Buffer.from(chunk.data.buffer, chunk.data.byteOffset, chunk.data.byteLength);
  return { stream: streamName(chunk.stream), data, offset: Number(chunk.offset) };
}

function streamName(stream: OutputStream): OutputStreamName {
  return stream === OutputStream.STDERR ? "stderr" : "stdout";
}
