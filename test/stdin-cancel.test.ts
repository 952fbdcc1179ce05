import { writeFileSync } from "node:fs";
import path from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SendInputRequestSchema } from "../gen/sandbox/v1/sandbox_pb.js";
import { Code, streamError, waitForExit } from "./support/rpc.js";
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

/** Requests that send `messages`, then keep the call open until it ends. */
async function* thenHold(messages: InputMessage[], signal: AbortSignal): AsyncGenerator<InputMessage> {
  yield* messages;
  await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
}

describe("SendInput to a process that does not read its stdin", () => {
  it("drops the data of a call that ends while its write waits, and acknowledges close at once", async () => {
    const flag = path.join(t.workspace, "go");
    const { process } = await t.client.startProcess({
      spec: { command: `while [ ! -e ${flag} ]; do sleep 0.02; done; wc -c`, stdin: true, autoCleanup: false },
    });
    const processId = process!.processId;
    const held = new AbortController();
    try {
      // More than the stdin socket holds, written straight through the manager so that it is
      // certainly pending: the process reads nothing until the flag exists.
      const big = Buffer.alloc(4 * 1024 * 1024, "x");
      const pending = t.server.manager.get(processId).write(big);
      // Queued behind the stuck write when its deadline passes: it must never be written.
      const late = await streamError(
        t.client.sendInput(thenHold([open(processId), data("dropped")], held.signal), { timeoutMs: 300 }),
      );
      expect(late.code).toBe(Code.DeadlineExceeded);
      // Closing is acknowledged although the writes before it still wait for the process.
      const acks = [];
      async function* openAndClose() {
        yield open(processId);
        yield close;
      }
      for await (const ack of t.client.sendInput(openAndClose())) acks.push(ack);
      expect(acks.at(-1)?.closed).toBe(true);
      writeFileSync(flag, "");
      await waitForExit(t.client, processId);
      const { stdout } = await t.client.getProcessLogs({ processId });
      // The pending write arrives, then EOF; the write queued behind it when its call ended never does.
      expect(await pending).toBe(big.length);
      expect(Buffer.from(stdout).toString().trim()).toBe(String(big.length));
    } finally {
      held.abort();
      // Already exited when the test passed; this only cleans up after a failure.
      await t.client.killProcess({ processId, signal: "SIGKILL" }).catch(() => {});
    }
  });
});

describe("a signal never waits behind input", () => {
  it("SIGTERM reaches a process that does not read, while megabytes of its input are still pending", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "sleep 60", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    const held = new AbortController();
    const acks: bigint[] = [];
    const call = (async () => {
      try {
        for await (const ack of t.client.sendInput(
          thenHold(
            [
              open(processId),
              data(Buffer.alloc(3 * 1024 * 1024)),
              data(Buffer.alloc(3 * 1024 * 1024)),
              { input: { case: "signal", value: "SIGTERM" } },
            ],
            held.signal,
          ),
        )) {
          acks.push(ack.bytesWritten);
        }
      } catch {
        // Ends once the process has exited and the call is let go.
      }
    })();
    try {
      const exit = await waitForExit(t.client, processId);
      expect(exit.signal).toBe("SIGTERM");
      // The data never reached it: only the open was answered before the exit.
      expect(acks[0]).toBe(0n);
    } finally {
      held.abort();
      await call;
      await t.client.killProcess({ processId, signal: "SIGKILL" }).catch(() => {});
    }
  });
});

describe("a SendInput message that fails", () => {
  it("ends the call with its status even while the client keeps its side open", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "cat", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    const held = new AbortController();
    try {
      // Data after end-of-input: refused. The client sends nothing more and waits for answers, as the SDK does.
      const error = await streamError(
        t.client.sendInput(thenHold([open(processId), close, data("late")], held.signal), { timeoutMs: 10_000 }),
      );
      expect(error.code).toBe(Code.FailedPrecondition);
      expect(error.rawMessage).toBe(`stdin of process ${processId} is closed`);
    } finally {
      held.abort();
      await t.client.killProcess({ processId, signal: "SIGKILL" }).catch(() => {});
    }
  });
});
