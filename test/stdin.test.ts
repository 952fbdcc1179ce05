import type { MessageInitShape } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SendInputRequestSchema, SendInputResponse } from "../gen/sandbox/v1/sandbox_pb.js";
import { Code, collectExec, ProcessStatus, rpcError, waitForExit } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

type InputMessage = MessageInitShape<typeof SendInputRequestSchema>;

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

const open = (processId: string): InputMessage => ({ input: { case: "open", value: { processId } } });
const data = (bytes: Uint8Array | string): InputMessage => ({
  input: { case: "data", value: typeof bytes === "string" ? Buffer.from(bytes) : bytes },
});
const close: InputMessage = { input: { case: "close", value: {} } };

/**
 * A SendInput call driven one message at a time: `send` resolves with the acknowledgement of that
 * message, so a test sees exactly what each message did.
 */
function inputSession(): { send(message: InputMessage): Promise<SendInputResponse>; end(): void } {
  const pending: InputMessage[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  async function* requests(): AsyncGenerator<InputMessage> {
    for (;;) {
      const next = pending.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (ended) return;
      await new Promise<void>((resolve) => (wake = resolve));
    }
  }
  const responses = t.client.sendInput(requests())[Symbol.asyncIterator]();
  return {
    async send(message) {
      pending.push(message);
      wake?.();
      const next = await responses.next();
      if (next.done) throw new Error("SendInput ended without an acknowledgement");
      return next.value;
    },
    end() {
      ended = true;
      wake?.();
    },
  };
}

/** Everything a finished process wrote to stdout, from GetProcessLogs. */
async function stdoutOf(processId: string): Promise<Buffer> {
  await waitForExit(t.client, processId);
  return Buffer.from((await t.client.getProcessLogs({ processId })).stdout);
}

describe("SendInput with end-of-input", () => {
  it("feeds cat, acknowledges bytes written so far, and EOF lets it exit", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "cat", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    expect(process?.stdin).toBe(true);
    const session = inputSession();
    expect(await session.send(open(processId))).toMatchObject({ bytesWritten: 0n, closed: false });
    expect(await session.send(data("hello "))).toMatchObject({ bytesWritten: 6n, closed: false });
    expect(await session.send(data("world"))).toMatchObject({ bytesWritten: 11n, closed: false });
    expect(await session.send(close)).toMatchObject({ bytesWritten: 11n, closed: true });
    session.end();
    expect((await stdoutOf(processId)).toString()).toBe("hello world");
    expect((await t.client.getProcess({ processId })).process?.exit?.status).toBe(ProcessStatus.COMPLETED);
  });

  it("feeds wc -c a megabyte in pieces; it counts every byte", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "wc -c", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    const piece = Buffer.alloc(64 * 1024, 0xab);
    const messages: InputMessage[] = [open(processId), ...Array.from({ length: 16 }, () => data(piece)), close];
    const acks: bigint[] = [];
    async function* requests() {
      yield* messages;
    }
    for await (const ack of t.client.sendInput(requests())) acks.push(ack.bytesWritten);
    expect(acks).toHaveLength(18);
    expect(acks.at(-2)).toBe(1024n * 1024n);
    expect(acks).toEqual([0n, ...Array.from({ length: 16 }, (_, i) => BigInt((i + 1) * piece.length)), 1024n * 1024n]);
    expect((await stdoutOf(processId)).toString().trim()).toBe("1048576");
  });

  it("feeds an Exec call's command while its output streams", async () => {
    const events = t.client.exec({ spec: { command: "cat", stdin: true } })[Symbol.asyncIterator]();
    const first = await events.next();
    if (first.done || first.value.event.case !== "started") throw new Error("no started event");
    expect(first.value.event.value.stdin).toBe(true);
    const session = inputSession();
    await session.send(open(first.value.event.value.processId));
    await session.send(data("streamed input\n"));
    // The echo comes back on the Exec stream before end-of-input.
    const echoed = await events.next();
    expect(echoed.value?.event.case).toBe("output");
    expect(Buffer.from((echoed.value?.event.value as { data: Uint8Array }).data).toString()).toBe("streamed input\n");
    await session.send(close);
    session.end();
    const rest = [];
    for (let next = await events.next(); !next.done; next = await events.next()) rest.push(next.value.event);
    expect(rest.map((event) => event.case)).toEqual(["exited"]);
    expect(rest[0].case === "exited" && rest[0].value.status).toBe(ProcessStatus.COMPLETED);
  });

  it("counts bytes written by all SendInput calls together", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "cat", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    const first = inputSession();
    await first.send(open(processId));
    expect((await first.send(data("abc"))).bytesWritten).toBe(3n);
    first.end();
    const second = inputSession();
    expect((await second.send(open(processId))).bytesWritten).toBe(3n);
    expect((await second.send(data("de"))).bytesWritten).toBe(5n);
    await second.send(close);
    second.end();
    expect((await stdoutOf(processId)).toString()).toBe("abcde");
  });
});

describe("stdin_data", () => {
  it("is written at start and then closed: wc -c and cat see exactly those bytes", async () => {
    const payload = Buffer.alloc(1024 * 1024 + 3);
    for (let i = 0; i < payload.length; i++) payload[i] = (i * 7 + (i >> 9)) & 0xff;
    const counted = await collectExec(t.client, { command: "wc -c", stdinData: payload });
    expect(counted.stdout.toString().trim()).toBe(String(payload.length));
    const echoed = await collectExec(t.client, { command: "cat", stdinData: payload });
    expect(echoed.stdout.equals(payload)).toBe(true);
    expect(echoed.exited.status).toBe(ProcessStatus.COMPLETED);
  });

  it("with stdin set, stays open for SendInput after the initial bytes", async () => {
    const { process } = await t.client.startProcess({
      spec: { command: "cat", stdin: true, stdinData: Buffer.from("first,"), autoCleanup: false },
    });
    const processId = process!.processId;
    const session = inputSession();
    const opened = await session.send(open(processId));
    expect(opened.closed).toBe(false);
    await session.send(data("second"));
    expect(await session.send(close)).toMatchObject({ bytesWritten: 12n, closed: true });
    session.end();
    expect((await stdoutOf(processId)).toString()).toBe("first,second");
  });
});

describe("without stdin", () => {
  it("a command reads /dev/null and never hangs waiting for input", async () => {
    const result = await collectExec(t.client, { command: "cat; wc -c", timeoutMs: 10_000 });
    expect(result.exited.status).toBe(ProcessStatus.COMPLETED);
    expect(result.exited.timedOut).toBe(false);
    expect(result.stdout.toString().trim()).toBe("0");
  });
});

describe("multi-byte UTF-8", () => {
  const text = "héllo wörld — 日本語 🎉 ünïcödé";
  it("split across input messages arrives intact", async () => {
    const bytes = Buffer.from(text);
    const { process } = await t.client.startProcess({ spec: { command: "cat", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    const session = inputSession();
    await session.send(open(processId));
    // One byte per message: every multi-byte character is split.
    for (let i = 0; i < bytes.length; i++) await session.send(data(bytes.subarray(i, i + 1)));
    await session.send(close);
    session.end();
    const output = await stdoutOf(processId);
    expect(output.equals(bytes)).toBe(true);
    expect(new TextDecoder("utf-8", { fatal: true }).decode(output)).toBe(text);
  });

  it("split across output chunks decodes intact when the client joins the bytes", async () => {
    // Each printf is a separate write that cuts a character in two; the pauses make separate chunks likely.
    const halves = Buffer.from("日🎉");
    const octal = (bytes: Buffer) => [...bytes].map((byte) => `\\${byte.toString(8).padStart(3, "0")}`).join("");
    const command = `printf '${octal(halves.subarray(0, 2))}'; sleep 0.05; printf '${octal(halves.subarray(2, 5))}'; sleep 0.05; printf '${octal(halves.subarray(5))}'`;
    const result = await collectExec(t.client, { command });
    expect(result.stdout.equals(halves)).toBe(true);
    const decoder = new TextDecoder("utf-8", { fatal: true });
    // A streaming decoder fed chunk by chunk, as a client prints them, gives the same text.
    let streamed = "";
    for (const chunk of result.chunks) streamed += decoder.decode(chunk.data, { stream: true });
    streamed += decoder.decode();
    expect(streamed).toBe("日🎉");
  });
});

describe("PTY input and signals", () => {
  it("sends input through the terminal and ^D as end-of-input", async () => {
    const { process } = await t.client.startProcess({
      spec: { command: "wc -c", pty: { cols: 80, rows: 24 }, autoCleanup: false },
    });
    const processId = process!.processId;
    const session = inputSession();
    await session.send(open(processId));
    await session.send(data("abc\n"));
    await session.send({ input: { case: "resize", value: { cols: 100, rows: 30 } } });
    expect((await session.send(close)).closed).toBe(true);
    session.end();
    // The terminal echoes the line and turns \n into \r\n; wc counts the 4 bytes it read.
    expect((await stdoutOf(processId)).toString()).toBe("abc\r\n4\r\n");
  });

  it("end-of-input after a partial line (no newline) still ends the input: the pending line, then EOF", async () => {
    const { process } = await t.client.startProcess({
      spec: { command: "wc -c", pty: { cols: 80, rows: 24 }, autoCleanup: false },
    });
    const processId = process!.processId;
    const session = inputSession();
    await session.send(open(processId));
    await session.send(data("abc"));
    expect((await session.send(close)).closed).toBe(true);
    session.end();
    // A lone ^D after "abc" only hands "abc" to wc, which would go on waiting; a second one is EOF.
    const exit = await waitForExit(t.client, processId, 5000);
    expect(exit.exitCode).toBe(0);
    expect((await stdoutOf(processId)).toString()).toMatch(/^abc.*3\r\n$/s);
  });

  it("delivers a signal to the process group without counting it as a kill", async () => {
    const { process } = await t.client.startProcess({
      spec: { command: "sleep", args: ["1000.5"], stdin: true, autoCleanup: false },
    });
    const processId = process!.processId;
    const session = inputSession();
    await session.send(open(processId));
    await session.send({ input: { case: "signal", value: "SIGINT" } });
    session.end();
    const exit = await waitForExit(t.client, processId);
    expect(exit.signal).toBe("SIGINT");
    expect(exit.killed).toBe(false);
  });
});

describe("input racing the exit never crashes the daemon", () => {
  it("writing to a command that stopped reading (EPIPE) fails cleanly or succeeds, and the server keeps serving", async () => {
    for (let round = 0; round < 5; round++) {
      const { process } = await t.client.startProcess({
        spec: { command: "head -c 10", stdin: true, autoCleanup: false },
      });
      const processId = process!.processId;
      // Pieces below the server's message limit; together far more than a pipe holds.
      const big = Buffer.alloc(1024 * 1024, 0x61);
      async function* requests(): AsyncGenerator<InputMessage> {
        yield open(processId);
        for (let i = 0; i < 16; i++) yield data(big);
        yield close;
      }
      const outcome = await rpcError(async () => {
        for await (const _ of t.client.sendInput(requests())) {
          // Acknowledged.
        }
        throw new Error("all input accepted");
      });
      if (outcome.message !== "[unknown] all input accepted") {
        // EPIPE once the command stopped reading: its stdin is closed, or it has exited by then.
        expect(`${Code[outcome.code]}: ${outcome.rawMessage}`).toMatch(
          /^FailedPrecondition: (stdin of process .* is closed|process has exited: .*)$/,
        );
      }
      expect((await stdoutOf(processId)).toString()).toBe("a".repeat(10));
    }
    const alive = await collectExec(t.client, { command: "echo alive" });
    expect(alive.stdout.toString()).toBe("alive\n");
  });
});
