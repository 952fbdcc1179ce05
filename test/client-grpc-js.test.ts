import path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { repositoryRoot } from "./support/tools.js";

/** A message as proto-loader decodes it with the options below: plain objects, oneofs named. */
type Decoded = Record<string, any>;

/** The contract exactly as it is in the repository, loaded at run time: no generated code. */
const definition = protoLoader.loadSync(path.join(repositoryRoot, "proto/sandbox/v1/sandbox.proto"), {
  includeDirs: [path.join(repositoryRoot, "proto")],
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const SandboxService = (grpc.loadPackageDefinition(definition) as Decoded).sandbox.v1
  .SandboxService as grpc.ServiceClientConstructor;

/** Reads a server stream to its end; rejects with the call's error. */
function collect(
  call: grpc.ClientReadableStream<Decoded> | grpc.ClientDuplexStream<Decoded, Decoded>,
): Promise<Decoded[]> {
  return new Promise((resolve, reject) => {
    const messages: Decoded[] = [];
    call.on("data", (message: Decoded) => messages.push(message));
    call.on("error", reject);
    call.on("end", () => resolve(messages));
  });
}

/** Calls a unary method and resolves with its response or rejects with its ServiceError. */
function unary(client: grpc.Client, method: string, request: Decoded): Promise<Decoded> {
  return new Promise((resolve, reject) => {
    (
      client as unknown as Record<
        string,
        (request: Decoded, callback: (error: grpc.ServiceError | null, response: Decoded) => void) => void
      >
    )[method](request, (error, response) => (error ? reject(error) : resolve(response)));
  });
}

/** The concatenated bytes of the output events of one stream. */
function output(events: Decoded[], stream: string): string {
  return Buffer.concat(
    events
      .filter((event) => event.event === "output" && event.output.stream === stream)
      .map((event) => event.output.data as Buffer),
  ).toString();
}

describe("@grpc/grpc-js with @grpc/proto-loader loading sandbox.proto as it is", () => {
  let test: TestServer;
  let client: grpc.Client & Record<string, any>;

  beforeAll(async () => {
    test = await startTestServer();
    client = new SandboxService(`127.0.0.1:${test.server.port}`, grpc.credentials.createInsecure()) as typeof client;
  });
  afterAll(async () => {
    client.close();
    await test.close();
  });

  it("streams Exec: started first, output bytes, exited last with the exit code", async () => {
    const events = await collect(client.Exec({ spec: { command: "printf 'a\\0b'; printf err >&2; exit 7" } }));
    expect(events[0].event).toBe("started");
    expect(events[0].started.status).toBe("PROCESS_STATUS_RUNNING");
    expect(events.at(-1)!.event).toBe("exited");
    expect(events.at(-1)!.exited).toMatchObject({
      status: "PROCESS_STATUS_FAILED",
      exitCode: 7,
      stdoutBytes: "3",
      stderrBytes: "3",
    });
    expect(output(events, "OUTPUT_STREAM_STDOUT")).toBe("a\0b");
    expect(output(events, "OUTPUT_STREAM_STDERR")).toBe("err");
  });

  it("kills the command's process when the Exec call is cancelled", async () => {
    const marker = sleepMarker();
    const call = client.Exec({ spec: { command: `sleep ${marker}` } }) as grpc.ClientReadableStream<Decoded>;
    const ended = new Promise<grpc.ServiceError>((resolve) => call.on("error", resolve));
    call.on("data", () => {});
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep to start" });
    call.cancel();
    expect((await ended).code).toBe(grpc.status.CANCELLED);
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be killed" });
  });

  it("starts a process with StartProcess and follows it with StreamLogs to its exit", async () => {
    const started = await unary(client, "StartProcess", {
      spec: { command: "echo first; sleep 0.2; echo second", processId: "grpc-js-logs" },
    });
    expect(started.process).toMatchObject({ processId: "grpc-js-logs", status: "PROCESS_STATUS_RUNNING" });
    const events = await collect(client.StreamLogs({ processId: "grpc-js-logs", follow: true }));
    expect(events[0].event).toBe("process");
    expect(events.at(-1)!.event).toBe("exited");
    expect(events.at(-1)!.exited.status).toBe("PROCESS_STATUS_COMPLETED");
    expect(output(events, "OUTPUT_STREAM_STDOUT")).toBe("first\nsecond\n");
  });

  it("feeds stdin through the SendInput bidi stream, one acknowledgement per message", async () => {
    await unary(client, "StartProcess", { spec: { command: "wc -c", processId: "grpc-js-input", stdin: true } });
    const call = client.SendInput() as grpc.ClientDuplexStream<Decoded, Decoded>;
    const acks = collect(call);
    call.write({ open: { processId: "grpc-js-input" } });
    call.write({ data: Buffer.from("twelve bytes") });
    call.write({ close: {} });
    call.end();
    expect((await acks).map((ack) => [ack.bytesWritten, ack.closed])).toEqual([
      ["0", false],
      ["12", false],
      ["12", true],
    ]);
    const logs = await collect(client.StreamLogs({ processId: "grpc-js-input", follow: true }));
    expect(output(logs, "OUTPUT_STREAM_STDOUT").trim()).toBe("12");
  });

  it("gets NOT_FOUND with the server's message for an unknown process", async () => {
    const error = (await unary(client, "GetProcess", { processId: "no-such-process" }).catch(
      (caught: unknown) => caught,
    )) as grpc.ServiceError;
    expect(error.code).toBe(grpc.status.NOT_FOUND);
    // grpc-js decodes grpc-message with decodeURI, which leaves reserved characters (":") encoded:
    // the daemon escapes only what the gRPC spec asks, so the text reads as sent.
    expect(error.details).toBe("process not found: no-such-process");
    expect(error.message).toBe("5 NOT_FOUND: process not found: no-such-process");
    // Non-ASCII text is escaped (as UTF-8 bytes) and comes back whole.
    const unicode = (await unary(client, "GetProcess", { processId: "prozeß-ü" }).catch(
      (caught: unknown) => caught,
    )) as grpc.ServiceError;
    expect(unicode.details).toBe("process not found: prozeß-ü");
  });
});
