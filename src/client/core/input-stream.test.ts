import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { SandboxService, type SendInputRequest } from "../../../gen/sandbox/v1/sandbox_pb.js";
import { InputStream } from "./input-stream.js";

// The input stream against SendInput served by connect-es's in-memory router: the wire messages, their
// acknowledgements, a broken call and the end, with no network and no process behind them.

/** What one SendInput call received, and a way to make the service fail a call after some messages. */
function inputService(options: { failAfter?: number } = {}) {
  const calls: { messages: SendInputRequest["input"][]; ended: boolean }[] = [];
  let failuresLeft = options.failAfter === undefined ? 0 : 1;
  const transport = createRouterTransport(({ service }) => {
    service(SandboxService, {
      async *sendInput(requests) {
        const call = { messages: [] as SendInputRequest["input"][], ended: false };
        calls.push(call);
        let written = 0n;
        let closed = false;
        for await (const request of requests) {
          call.messages.push(request.input);
          if (failuresLeft > 0 && call.messages.length > (options.failAfter ?? 0)) {
            failuresLeft--;
            throw new ConnectError("connection reset", Code.Unavailable);
          }
          // Every message is acknowledged, in order, the first (open) included.
          if (request.input.case === "data") written += BigInt(request.input.value.length);
          if (request.input.case === "close") closed = true;
          yield { bytesWritten: written, closed };
        }
        call.ended = true;
      },
    });
  });
  return { client: createClient(SandboxService, transport), calls };
}

const data = (text: string) => ({ case: "data" as const, value: new TextEncoder().encode(text) });

describe("InputStream", () => {
  it("opens one call on the first message, then sends each message in order and resolves with its acknowledgement", async () => {
    const { client, calls } = inputService();
    const input = new InputStream(client, "p1");
    expect(await input.send(data("ab"))).toEqual({ bytesWritten: 2, closed: false });
    expect(await input.send(data("cde"))).toEqual({ bytesWritten: 5, closed: false });
    expect(await input.send({ case: "close", value: {} })).toEqual({ bytesWritten: 5, closed: true });
    expect(calls).toHaveLength(1);
    expect(calls[0].messages.map((message) => message.case)).toEqual(["open", "data", "data", "close"]);
    expect(calls[0].messages[0]).toMatchObject({ value: { processId: "p1" } });
    input.close();
  });

  it("fails the messages of a broken call with a SandboxError and opens one new call for the next", async () => {
    const { client, calls } = inputService({ failAfter: 1 });
    const input = new InputStream(client, "p2");
    await expect(input.send(data("lost"))).rejects.toMatchObject({ name: "SandboxError", code: "UNAVAILABLE" });
    expect(await input.send(data("again"))).toEqual({ bytesWritten: 5, closed: false });
    expect(calls.map((call) => call.messages.map((message) => message.case))).toEqual([
      ["open", "data"],
      ["open", "data"],
    ]);
    input.close();
  });

  it("ends its call on close(), and a later message opens a new one", async () => {
    const { client, calls } = inputService();
    const input = new InputStream(client, "p3");
    await input.send(data("x"));
    input.close();
    await expect.poll(() => calls[0].ended).toBe(true);
    expect(await input.send(data("y"))).toEqual({ bytesWritten: 1, closed: false });
    expect(calls).toHaveLength(2);
    input.close();
  });
});
