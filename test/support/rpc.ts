import { createCipheriv, createHash, randomInt } from "node:crypto";
import { readdirSync } from "node:fs";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type CallOptions, type Client } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import {
  OutputStream,
  ProcessStatus,
  type ExecRequestSchema,
  type OutputChunk,
  type ProcessExited,
  type ProcessInfo,
  SandboxService,
  type StreamLogsRequestSchema,
  type StreamLogsResponse,
} from "../../gen/sandbox/v1/sandbox_pb.js";
import { commandLine, isAlive, waitFor } from "./processes.js";

/** The generated client the tests use. */
export type SandboxClient = Client<typeof SandboxService>;

/**
 * A gRPC client on a connection of its own that does not accept compressed responses. The server
 * gzips every response a client accepts gzip for, which halves bulk-output throughput; tests that
 * move tens of megabytes or more use this client to stay fast. `close` aborts the connection.
 */
export function createUncompressedClient(baseUrl: string): { client: SandboxClient; close(): void } {
  const sessionManager = new Http2SessionManager(baseUrl);
  const client = createClient(SandboxService, createGrpcTransport({ baseUrl, sessionManager, acceptCompression: [] }));
  return { client, close: () => sessionManager.abort() };
}

/** Everything an Exec stream delivered, with the output of each stream concatenated. */
export interface ExecResult {
  started: ProcessInfo;
  exited: ProcessExited;
  chunks: OutputChunk[];
  stdout: Buffer;
  stderr: Buffer;
  /** Names of the event cases in arrival order. */
  cases: string[];
}

/** Runs Exec to its end and collects its events; throws if the first is not started or the last not exited. */
export async function collectExec(
  client: SandboxClient,
  spec: MessageInitShape<typeof ExecRequestSchema>["spec"],
  options: CallOptions = {},
): Promise<ExecResult> {
  const cases: string[] = [];
  const chunks: OutputChunk[] = [];
  let started: ProcessInfo | undefined;
  let exited: ProcessExited | undefined;
  for await (const response of client.exec({ spec }, options)) {
    const event = response.event;
    cases.push(event.case ?? "none");
    if (event.case === "started") started = event.value;
    if (event.case === "output") chunks.push(event.value);
    if (event.case === "exited") exited = event.value;
  }
  if (cases[0] !== "started" || started === undefined) throw new Error(`first Exec event was ${cases[0]}`);
  if (cases.at(-1) !== "exited" || exited === undefined) throw new Error(`last Exec event was ${cases.at(-1)}`);
  if (cases.filter((name) => name === "started" || name === "exited").length !== 2) {
    throw new Error(`Exec sent more than one started or exited event: ${cases.join(",")}`);
  }
  return {
    started,
    exited,
    chunks,
    stdout: joinStream(chunks, OutputStream.STDOUT),
    stderr: joinStream(chunks, OutputStream.STDERR),
    cases,
  };
}

/**
 * Concatenates the chunks of one stream, checking that their offsets are contiguous from `from`
 * (throws otherwise).
 */
export function joinStream(chunks: readonly OutputChunk[], stream: OutputStream, from = 0n): Buffer {
  let next = from;
  const parts: Uint8Array[] = [];
  for (const chunk of chunks) {
    if (chunk.stream !== stream) continue;
    if (chunk.offset !== next) throw new Error(`chunk at offset ${chunk.offset}, expected ${next}`);
    next += BigInt(chunk.data.length);
    parts.push(chunk.data);
  }
  return Buffer.concat(parts);
}

/** Collects a whole StreamLogs stream. */
export async function collectLogs(
  client: SandboxClient,
  request: MessageInitShape<typeof StreamLogsRequestSchema>,
  options: CallOptions = {},
): Promise<StreamLogsResponse["event"][]> {
  const events: StreamLogsResponse["event"][] = [];
  for await (const response of client.streamLogs(request, options)) events.push(response.event);
  return events;
}

/** The output chunks among StreamLogs events. */
export function outputChunks(events: readonly StreamLogsResponse["event"][]): OutputChunk[] {
  return events.flatMap((event) => (event.case === "output" ? [event.value] : []));
}

/** Awaits `operation` (a promise or a function returning one) and returns the ConnectError it fails with. */
export async function rpcError(operation: Promise<unknown> | (() => Promise<unknown>)): Promise<ConnectError> {
  try {
    await (typeof operation === "function" ? operation() : operation);
  } catch (error) {
    return ConnectError.from(error);
  }
  throw new Error("expected the call to fail");
}

/** Drains a server stream and returns the ConnectError it ends with. */
export async function streamError(stream: AsyncIterable<unknown>): Promise<ConnectError> {
  return rpcError(async () => {
    for await (const _ of stream) {
      // Drain.
    }
  });
}

/** Re-exported so tests need one import for codes. */
export { Code, ProcessStatus };

/**
 * A unique argument for `sleep` (such as `1000.4821937`) that marks the processes of one test in
 * /proc, so a test can see exactly its own processes and nobody else's.
 */
export function sleepMarker(seconds = 1000): string {
  return `${seconds}.${randomInt(1_000_000, 9_999_999)}`;
}

/** Pids of live processes whose command line is exactly `sleep <marker>` (not the shells that started them). */
export function sleepers(marker: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (commandLine(Number(entry)) === `sleep\0${marker}\0` && isAlive(Number(entry))) found.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/** Polls GetProcess until the process has exited; returns its exit. */
export async function waitForExit(
  client: SandboxClient,
  processId: string,
  timeoutMs = 10_000,
): Promise<ProcessExited> {
  return waitFor(
    async () => {
      const { process } = await client.getProcess({ processId });
      return process?.exit;
    },
    { timeoutMs, what: `process ${processId} to exit` },
  ) as Promise<ProcessExited>;
}

/** Key and IV of the deterministic pseudo-random byte stream of {@link deterministicBytesCommand}. */
const streamKey = "000102030405060708090a0b0c0d0e0f";
const streamIv = "f0e0d0c0b0a090807060504030201000";

/**
 * A shell command printing `length` deterministic, incompressible binary bytes (AES-128-CTR of
 * zeros, through openssl) fast, without a file.
 */
export function deterministicBytesCommand(length: number): string {
  return `openssl enc -aes-128-ctr -nosalt -K ${streamKey} -iv ${streamIv} -in /dev/zero 2>/dev/null | head -c ${length}`;
}

/** The first `length` bytes of {@link deterministicBytesCommand}'s stream, computed in process. */
export function deterministicBytes(length: number): Buffer {
  const cipher = createCipheriv("aes-128-ctr", Buffer.from(streamKey, "hex"), Buffer.from(streamIv, "hex"));
  const block = 16 * 1024 * 1024;
  const parts: Buffer[] = [];
  for (let done = 0; done < length; done += block)
    parts.push(cipher.update(Buffer.alloc(Math.min(block, length - done))));
  return Buffer.concat(parts);
}

/** Streams the sha256 of {@link deterministicBytesCommand}'s first `length` bytes without holding them. */
export function deterministicBytesSha256(length: number): string {
  const cipher = createCipheriv("aes-128-ctr", Buffer.from(streamKey, "hex"), Buffer.from(streamIv, "hex"));
  const hash = createHash("sha256");
  const block = 16 * 1024 * 1024;
  const zeros = Buffer.alloc(block);
  for (let done = 0; done < length; done += block) {
    hash.update(cipher.update(zeros.subarray(0, Math.min(block, length - done))));
  }
  return hash.digest("hex");
}
