import { afterEach, describe, expect, it } from "vitest";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { OutputStream, type SendInputRequestSchema } from "../gen/sandbox/v1/sandbox_pb.js";
import { waitFor } from "./support/processes.js";
import { Code, collectExec, collectLogs, deterministicBytesCommand, rpcError, sleepMarker } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

describe("the output of all records is bounded daemon-wide", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("past the budget the oldest exited output is dropped, reported as a gap; cleanup gives the rest back", async () => {
    const size = 256 * 1024;
    test = await startTestServer({ maxRetainedBytes: 600 * 1024 });
    const ids: string[] = [];
    for (let index = 0; index < 5; index++) {
      const started = await test.client.startProcess({
        spec: { command: deterministicBytesCommand(size), autoCleanup: false },
      });
      ids.push(started.process!.processId);
      await waitFor(
        async () => (await test!.client.getProcess({ processId: ids[index] })).process?.exit !== undefined,
        { what: "the exit" },
      );
    }
    const manager = test.server.manager;
    expect(manager.budget.usedBytes).toBeLessThanOrEqual(600 * 1024);
    // The newest two are whole; the oldest were dropped and a reader is told exactly what it missed.
    for (const id of ids.slice(-2)) {
      expect((await test.client.getProcessLogs({ processId: id })).stdout.length).toBe(size);
    }
    const oldest = await test.client.getProcessLogs({ processId: ids[0] });
    expect(oldest.stdout.length).toBe(0);
    expect(oldest.stdoutOffset).toBe(BigInt(size));
    const events = await collectLogs(test.client, { processId: ids[0], follow: false });
    const gap = events.find((event) => event.case === "gap");
    expect(gap?.value).toMatchObject({ stream: OutputStream.STDOUT, offset: 0n, missedBytes: BigInt(size) });
    expect(events.at(-1)?.case).toBe("exited");

    expect((await test.client.cleanupProcesses({})).removedCount).toBe(5);
    expect(manager.budget.usedBytes).toBe(0);
  });

  it("an Exec whose caller got everything keeps its record, not its output", async () => {
    test = await startTestServer();
    const result = await collectExec(test.client, { command: deterministicBytesCommand(100_000) });
    expect(result.stdout.length).toBe(100_000);
    const logs = await test.client.getProcessLogs({ processId: result.started.processId });
    expect(logs.process?.exit?.exitCode).toBe(0);
    expect(logs.stdout.length).toBe(0);
    expect(logs.stdoutOffset).toBe(100_000n);
    expect(test.server.manager.budget.usedBytes).toBe(0);
  });

  it("live output counts too: exited output goes first, then the largest live buffers are trimmed, a quiet one stays whole", async () => {
    const budget = 1024 * 1024;
    test = await startTestServer({ maxRetainedBytes: budget });
    const client = test.client;
    const written = async (processId: string) => {
      const logs = await client.getProcessLogs({ processId });
      return Number(logs.stdoutOffset) + logs.stdout.length;
    };
    const start = async (command: string) =>
      (await client.startProcess({ spec: { command, autoCleanup: false } })).process!.processId;
    const exited = await start(deterministicBytesCommand(256 * 1024));
    await waitFor(async () => (await client.getProcess({ processId: exited })).process?.exit !== undefined, {
      what: "the exit",
    });
    const quiet = await start(`printf quiet-output; sleep ${sleepMarker()}`);
    await waitFor(async () => (await written(quiet)) === 12, { what: "the quiet output" });
    const chatty: string[] = [];
    for (let index = 0; index < 4; index++)
      chatty.push(await start(`${deterministicBytesCommand(512 * 1024)}; sleep ${sleepMarker()}`));
    for (const id of chatty)
      await waitFor(async () => (await written(id)) === 512 * 1024, { what: "the chatty output" });

    const manager = test.server.manager;
    expect(manager.budget.usedBytes).toBeLessThanOrEqual(budget);
    // The exited record went first, all of it; a reader is told so.
    const gone = await client.getProcessLogs({ processId: exited });
    expect([gone.stdout.length, gone.stdoutOffset]).toEqual([0, BigInt(256 * 1024)]);
    // The quiet process keeps every byte.
    expect(Buffer.from((await client.getProcessLogs({ processId: quiet })).stdout).toString()).toBe("quiet-output");
    // The chatty ones share what is left: the largest is trimmed first, so none is wiped while another
    // holds much (levels are approximate: output is dropped a chunk of up to 64 KiB at a time, as it
    // arrives). Each kept its head (the first 64 KiB) and has one gap between it and the tail it kept.
    const kept = await Promise.all(
      chatty.map(async (processId) => (await client.getProcessLogs({ processId })).stdout.length),
    );
    for (const bytes of kept) {
      expect(bytes).toBeGreaterThan(64 * 1024);
      expect(bytes).toBeLessThan(512 * 1024 - 64 * 1024);
    }
    const events = await collectLogs(client, { processId: chatty[0], follow: false });
    expect(events.filter((event) => event.case === "gap")).toMatchObject([
      {
        case: "gap",
        value: { stream: OutputStream.STDOUT, offset: 65_536n, missedBytes: BigInt(512 * 1024 - 65_536 - kept[0]) },
      },
    ]);
    await client.killAllProcesses({ signal: "SIGKILL" });
  });

  it("input counts too: output gives way to it, and a write or stdin_data the budget cannot hold is refused, naming it", async () => {
    const budget = 1024 * 1024;
    test = await startTestServer({ maxRetainedBytes: budget });
    const { client, server } = test;
    const marker = sleepMarker();
    const chatty = (
      await client.startProcess({
        spec: { command: `${deterministicBytesCommand(512 * 1024)}; sleep ${marker}`, autoCleanup: false },
      })
    ).process!.processId;
    await waitFor(
      async () => (await client.getProcess({ processId: chatty })).process?.stdoutBytes === BigInt(512 * 1024),
      { what: "the output" },
    );
    // A process that never reads its stdin: what is written to it stays pending.
    const deaf = (await client.startProcess({ spec: { command: "sleep", args: [marker], stdin: true } })).process!
      .processId;
    const pending = server.manager.get(deaf).write(new Uint8Array(768 * 1024));
    pending.catch(() => {});
    // The output made room for the input.
    const trimmed = await client.getProcessLogs({ processId: chatty });
    expect(trimmed.stdoutOffset).toBeGreaterThan(0n);
    expect(server.manager.budget.usedBytes).toBeLessThanOrEqual(budget);
    // What is left cannot be dropped: more input is refused, not held.
    const refused = await server.manager
      .get(deaf)
      .write(new Uint8Array(512 * 1024))
      .catch((error: unknown) => error);
    expect(refused).toMatchObject({
      reason: "LIMIT_EXCEEDED",
      metadata: { limit: "max-retained-bytes", value: String(budget) },
    });
    const start = await rpcError(
      client.startProcess({ spec: { command: "cat", stdinData: new Uint8Array(512 * 1024) } }),
    );
    expect(start.code).toBe(Code.ResourceExhausted);
    expect(start.rawMessage).toBe(
      `stdin_data of ${512 * 1024} bytes does not fit now: the daemon's budget of ${budget} bytes for output and input is full`,
    );
    await client.killAllProcesses({ signal: "SIGKILL" });
    await expect(pending).rejects.toMatchObject({ reason: "PROCESS_NOT_RUNNING" });
    // The input is gone with the process; what is left is output.
    expect(server.manager.budget.usedBytes).toBe(
      server.manager.list().reduce((sum, managed) => sum + managed.retainedBytes, 0),
    );
  });

  it("input is not starved by output an Exec caller does not read: stdin may always use half the budget", async () => {
    const budget = 1024 * 1024;
    test = await startTestServer({ maxRetainedBytes: budget });
    const { client, server } = test;
    // A caller that takes the first event and reads nothing more: its output fills the budget and cannot go.
    const lagging = client.exec({ spec: { command: "head -c 8388608 /dev/zero" } })[Symbol.asyncIterator]();
    expect((await lagging.next()).value?.event.case).toBe("started");
    await waitFor(() => server.manager.budget.exhausted, { what: "the budget to fill" });
    const { process } = await client.startProcess({ spec: { command: "wc -c", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    async function* input(): AsyncGenerator<MessageInitShape<typeof SendInputRequestSchema>> {
      yield { input: { case: "open", value: { processId } } };
      yield { input: { case: "data", value: new Uint8Array(256 * 1024) } };
      yield { input: { case: "close", value: {} } };
    }
    let acks = 0;
    for await (const _ of client.sendInput(input(), { timeoutMs: 20_000 })) acks++;
    expect(acks).toBe(3);
    await waitFor(async () => (await client.getProcess({ processId })).process?.exit !== undefined, {
      what: "wc to exit",
    });
    expect(
      Buffer.from((await client.getProcessLogs({ processId })).stdout)
        .toString()
        .trim(),
    ).toBe(String(256 * 1024));
    expect(server.manager.budget.exhausted).toBe(true);
    // The lagging caller reads the rest: every byte, then the exit.
    let bytes = 0;
    for (let next = await lagging.next(); !next.done; next = await lagging.next()) {
      if (next.value.event.case === "output") bytes += next.value.event.value.data.length;
    }
    expect(bytes).toBe(8 * 1024 * 1024);
  });

  it("stdin_data larger than the whole budget is refused, naming it", async () => {
    test = await startTestServer({ maxRetainedBytes: 64 * 1024 });
    const error = await rpcError(
      test.client.startProcess({ spec: { command: "cat", stdinData: new Uint8Array(64 * 1024 + 1) } }),
    );
    expect(error.code).toBe(Code.ResourceExhausted);
    expect(error.rawMessage).toBe(
      "stdin_data of 65537 bytes is larger than the daemon's budget of 65536 bytes for output and input",
    );
    expect(test.server.manager.list()).toHaveLength(0);
  });
});
