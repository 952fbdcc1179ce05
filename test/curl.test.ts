import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "./support/server.js";
import { runCommand } from "./support/tools.js";

/** Splits a Connect streaming body into its messages: 1 flag byte and a 4-byte length before each. */
function envelopes(body: Buffer): { flags: number; json: unknown }[] {
  const messages: { flags: number; json: unknown }[] = [];
  for (let at = 0; at < body.length; ) {
    const length = body.readUInt32BE(at + 1);
    messages.push({ flags: body[at], json: JSON.parse(body.subarray(at + 5, at + 5 + length).toString()) });
    at += 5 + length;
  }
  return messages;
}

/** One Connect streaming request message: flags 0, big-endian length, JSON. */
function envelope(json: unknown): Buffer {
  const payload = Buffer.from(JSON.stringify(json));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

describe("plain curl over HTTP/1.1 with JSON (the Connect protocol)", () => {
  let test: TestServer;
  const url = (method: string) => `${test.server.url}/sandbox.v1.SandboxService/${method}`;
  /** Runs curl and returns the HTTP version, the status and the body, split on the marker curl writes last. */
  const curl = async (args: string[]) => {
    const result = await runCommand("curl", ["-sS", "--http1.1", "-w", "\n@@%{http_version} %{http_code}", ...args]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    const at = result.stdout.lastIndexOf("\n@@");
    const [version, status] = result.stdout.slice(at + 3).split(" ");
    return { version, status: Number(status), body: result.stdout.slice(0, at) };
  };

  beforeAll(async () => {
    test = await startTestServer();
  });
  afterAll(async () => {
    await test.close();
  });

  it("calls unary RPCs with a JSON body and gets JSON back", async () => {
    const start = await curl([
      "-H",
      "Content-Type: application/json",
      "-d",
      '{"spec":{"command":"sleep 0.2; echo done","processId":"curl-unary"}}',
      url("StartProcess"),
    ]);
    expect(start.version).toBe("1.1");
    expect(start.status).toBe(200);
    expect(JSON.parse(start.body)).toMatchObject({
      process: { processId: "curl-unary", status: "PROCESS_STATUS_RUNNING" },
    });
    const list = await curl(["-H", "Content-Type: application/json", "-d", "{}", url("ListProcesses")]);
    expect(JSON.parse(list.body).processes.map((process: { processId: string }) => process.processId)).toContain(
      "curl-unary",
    );
  });

  it("gets a Connect error as JSON with the matching HTTP status", async () => {
    const missing = await curl([
      "-H",
      "Content-Type: application/json",
      "-d",
      '{"processId":"no-such-process"}',
      url("GetProcess"),
    ]);
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.body)).toEqual({
      code: "not_found",
      message: "process not found: no-such-process",
      // The reason every language can branch on: a google.rpc.ErrorInfo, with its JSON form under debug.
      details: [
        {
          type: "google.rpc.ErrorInfo",
          value: expect.any(String),
          debug: { reason: "PROCESS_NOT_FOUND", domain: "sandbox.v1", metadata: { process_id: "no-such-process" } },
        },
      ],
    });
  });

  it("streams Exec events (server streaming) over HTTP/1.1, each framed, with an end-of-stream message last", async () => {
    const request = envelope({ spec: { command: "printf hello; printf oops >&2; exit 2" } });
    // Binary in and out: curl reads the framed request from stdin and writes the framed response.
    const result = await runCommand(
      "bash",
      [
        "-c",
        `curl -sS --http1.1 --no-buffer -H 'Content-Type: application/connect+json' --data-binary @- '${url("Exec")}' | base64 -w0`,
      ],
      { input: request },
    );
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    const messages = envelopes(Buffer.from(result.stdout, "base64"));
    expect(messages.at(-1)).toEqual({ flags: 2, json: {} });
    const events = messages.slice(0, -1).map((message) => message.json as Record<string, Record<string, unknown>>);
    expect(Object.keys(events[0])).toEqual(["started"]);
    expect(events.at(-1)!.exited).toMatchObject({
      status: "PROCESS_STATUS_FAILED",
      exitCode: 2,
      stdoutBytes: "5",
      stderrBytes: "4",
    });
    const text = (stream: string) =>
      Buffer.concat(
        events
          .filter((event) => event.output?.stream === stream)
          .map((event) => Buffer.from(event.output.data as string, "base64")),
      ).toString();
    expect(text("OUTPUT_STREAM_STDOUT")).toBe("hello");
    expect(text("OUTPUT_STREAM_STDERR")).toBe("oops");
  });
});
