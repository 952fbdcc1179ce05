import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessService, Signal, type StartRequestSchema, type StartResponse } from "../gen/process/v1/process_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { expectReason } from "./support/errors.js";
import { rpcError, streamError } from "./support/rpc.js";
import { startInMemoryService, type InMemoryService } from "./support/server.js";

// The service tier of KEP-539.2's process.v1.ProcessService: the daemon's routes through
// createRouterTransport (no network, no HTTP, no compat listener) on a real process manager running real
// processes. The listeners, the SDK and grpcurl drive it over the wire in their own tests.
let s: InMemoryService<typeof ProcessService>;
beforeAll(async () => {
  s = await startInMemoryService({ service: ProcessService });
});
afterAll(async () => {
  await s.close();
});

/** A Start stream: its events as they come, the init's pid, and the rest up to its exit. */
function start(request: MessageInitShape<typeof StartRequestSchema>) {
  const iterator = s.client.start(request)[Symbol.asyncIterator]();
  const next = async (): Promise<StartResponse["event"]> => {
    const result = await iterator.next();
    if (result.done) throw new Error("the Start stream ended without an exit event");
    return result.value.event;
  };
  return {
    async init(): Promise<number> {
      const event = await next();
      if (event.case !== "init") throw new Error(`first event ${event.case}, not init`);
      return event.value.processId;
    },
    async drain(): Promise<{ stdout: string; stderr: string; exitCode: number }> {
      let stdout = "";
      let stderr = "";
      for (;;) {
        const event = await next();
        if (event.case === "stdout") stdout += Buffer.from(event.value).toString();
        else if (event.case === "stderr") stderr += Buffer.from(event.value).toString();
        else if (event.case === "exit") {
          expect((await iterator.next()).done).toBe(true);
          return { stdout, stderr, exitCode: event.value.exitCode };
        }
      }
    },
  };
}

describe("process.v1 through the router", () => {
  it("Execute answers the exit code and both streams, byte for byte", async () => {
    const result = await s.client.execute({
      config: { command: ["sh", "-c", "printf 'out\\0\\377'; printf err >&2; exit 3"], envVars: { A: "1" } },
    });
    expect(result.exitCode).toBe(3);
    expect(Buffer.from(result.stdout)).toEqual(Buffer.from([0x6f, 0x75, 0x74, 0x00, 0xff]));
    expect(Buffer.from(result.stderr).toString()).toBe("err");
  });

  it("Start gives the OS pid first; WriteStdin's input and EOF reach the command; the exit comes last", async () => {
    const stream = start({ config: { command: ["cat"] } });
    const pid = await stream.init();
    // The pid is the command's own, and the same process appears in sandbox.v1's list with it.
    expect(s.manager.list().some((record) => record.pid === pid)).toBe(true);
    await s.client.writeStdin({ processId: pid, payload: { case: "input", value: Buffer.from("piped\n") } });
    await s.client.writeStdin({ processId: pid, payload: { case: "eof", value: {} } });
    expect(await stream.drain()).toEqual({ stdout: "piped\n", stderr: "", exitCode: 0 });
  });

  it("SendSignal ends the command with 128 + n; an exited or unknown pid is NOT_FOUND on every call", async () => {
    const stream = start({ config: { command: ["sleep", "30"] } });
    const pid = await stream.init();
    await s.client.sendSignal({ processId: pid, signal: Signal.SIGTERM });
    expect((await stream.drain()).exitCode).toBe(143);
    const notFound = { code: Code.NotFound, reason: "PROCESS_NOT_FOUND", metadata: { pid: String(pid) } };
    expectReason(await rpcError(s.client.sendSignal({ processId: pid, signal: Signal.SIGKILL })), notFound);
    expectReason(
      await rpcError(s.client.writeStdin({ processId: pid, payload: { case: "eof", value: {} } })),
      notFound,
    );
    expectReason(await rpcError(s.client.resizeTTY({ processId: pid, cols: 80, rows: 24 })), notFound);
  });

  it("ResizeTTY of a command without a PTY is FAILED_PRECONDITION; a cwd out of the workspace PERMISSION_DENIED", async () => {
    const stream = start({ config: { command: ["cat"] } });
    const pid = await stream.init();
    expectReason(await rpcError(s.client.resizeTTY({ processId: pid, cols: 80, rows: 24 })), {
      code: Code.FailedPrecondition,
      reason: "PTY_NOT_OPEN",
      metadata: { process_id: expect.any(String) as unknown as string },
    });
    await s.client.writeStdin({ processId: pid, payload: { case: "eof", value: {} } });
    expect((await stream.drain()).exitCode).toBe(0);
    for (const cwd of ["..", "/etc"]) {
      expectReason(await rpcError(s.client.execute({ config: { command: ["pwd"], cwd } })), {
        code: Code.PermissionDenied,
        reason: "CWD_OUTSIDE_WORKSPACE",
        metadata: { cwd, roots: s.workspace },
      });
      expectReason(await streamError(s.client.start({ config: { command: ["pwd"], cwd } })), {
        code: Code.PermissionDenied,
        reason: "CWD_OUTSIDE_WORKSPACE",
        metadata: { cwd, roots: s.workspace },
      });
    }
  });
});
