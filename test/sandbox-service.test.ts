import type { MessageInitShape } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessStatus, type SendInputRequestSchema } from "../gen/sandbox/v1/sandbox_pb.js";
import { defaultListPageSize, maxListPageSize, pageSize } from "../src/server/rpc/page-token.js";
import { expectReason } from "./support/errors.js";
import { waitFor } from "./support/processes.js";
import {
  Code,
  collectExec,
  collectLogs,
  outputChunks,
  rpcError,
  sleepMarker,
  streamError,
  waitForExit,
} from "./support/rpc.js";
import { startInMemoryService, type InMemoryService } from "./support/server.js";

// The service tier: the daemon's routes through createRouterTransport (no network, no HTTP), on a
// real process manager running real processes. Transport behaviour is tested against real servers.
let s: InMemoryService;
beforeAll(async () => {
  s = await startInMemoryService();
});
afterAll(async () => {
  await s.close();
});

describe("Exec, StreamLogs and SendInput through the router", () => {
  it("Exec streams started, the output and exited, a non-zero exit as data", async () => {
    const result = await collectExec(s.client, { command: "printf out; printf err >&2; exit 4" });
    expect(result.cases[0]).toBe("started");
    expect(result.stdout.toString()).toBe("out");
    expect(result.stderr.toString()).toBe("err");
    expect(result.exited).toMatchObject({ status: ProcessStatus.FAILED, exitCode: 4 });
  });

  it("StreamLogs without follow ends with caught_up at the offsets sent, and resumes from an offset", async () => {
    const { process } = await s.client.startProcess({
      spec: { command: `printf abcdef; sleep ${sleepMarker(30)}`, processId: "snapshot" },
    });
    try {
      await waitFor(async () => (await s.client.getProcess({ processId: "snapshot" })).process?.stdoutBytes === 6n, {
        what: "the output",
      });
      const events = await collectLogs(s.client, { processId: "snapshot" });
      expect(events[0].case).toBe("process");
      const last = events.at(-1)!;
      expect(last.case === "caughtUp" && [last.value.stdoutOffset, last.value.stderrOffset]).toEqual([6n, 0n]);
      const resumed = await collectLogs(s.client, { processId: "snapshot", stdoutOffset: 4n });
      expect(Buffer.concat(outputChunks(resumed).map((chunk) => chunk.data)).toString()).toBe("ef");
    } finally {
      await s.client.killProcess({ processId: process!.processId, signal: "SIGKILL" });
    }
  });

  it("SendInput writes, closes and acknowledges each message in order", async () => {
    await s.client.startProcess({
      spec: { command: "tr a-z A-Z", stdin: true, processId: "upper", autoCleanup: false },
    });
    async function* messages(): AsyncGenerator<MessageInitShape<typeof SendInputRequestSchema>> {
      yield { input: { case: "open", value: { processId: "upper" } } };
      yield { input: { case: "data", value: Buffer.from("hi\n") } };
      yield { input: { case: "close", value: {} } };
    }
    const acks = [];
    for await (const ack of s.client.sendInput(messages())) acks.push([ack.bytesWritten, ack.closed]);
    expect(acks).toEqual([
      [0n, false],
      [3n, false],
      [3n, true],
    ]);
    await waitForExit(s.client, "upper");
    expect(Buffer.from((await s.client.getProcessLogs({ processId: "upper" })).stdout).toString()).toBe("HI\n");
  });

  it("the router's shutdown signal ends a follow with SHUTTING_DOWN", async () => {
    const other = await startInMemoryService();
    try {
      await other.client.startProcess({ spec: { command: "sleep", args: [sleepMarker(30)], processId: "held" } });
      const follow = other.client.streamLogs({ processId: "held", follow: true })[Symbol.asyncIterator]();
      expect((await follow.next()).value?.event.case).toBe("process");
      other.shutdownCalls();
      expectReason(await rpcError(follow.next()), { code: Code.Unavailable, reason: "SHUTTING_DOWN" });
    } finally {
      await other.close();
    }
  });
});

describe("ListProcesses pages", () => {
  let service: InMemoryService;
  const ids = ["p0", "p1", "p2", "p3", "p4"];
  beforeAll(async () => {
    service = await startInMemoryService();
    for (const processId of ids)
      await service.client.startProcess({
        spec: { command: "true", processId, sessionId: "paged", autoCleanup: false },
      });
    for (const processId of ids) await waitForExit(service.client, processId);
  });
  afterAll(async () => {
    await service.close();
  });

  /** Every page of a listing, following next_page_token. */
  async function pages(request: {
    sessionId?: string;
    pageSize?: number;
    statuses?: ProcessStatus[];
  }): Promise<string[][]> {
    const found: string[][] = [];
    let pageToken = "";
    do {
      const page = await service.client.listProcesses({ ...request, pageToken });
      found.push(page.processes.map((process) => process.processId));
      pageToken = page.nextPageToken;
    } while (pageToken !== "" && found.length < 100);
    return found;
  }

  it("comes oldest first in pages of page_size, the last with an empty next_page_token", async () => {
    expect(await pages({ sessionId: "paged", pageSize: 2 })).toEqual([["p0", "p1"], ["p2", "p3"], ["p4"]]);
    expect(await pages({ sessionId: "paged", pageSize: 5 })).toEqual([ids]);
    // 0 is the default size, which holds them all.
    expect(await pages({ sessionId: "paged" })).toEqual([ids]);
  });

  it("shows records created after the first page on a later page, and a replaced id as new", async () => {
    const first = await service.client.listProcesses({ sessionId: "paged", pageSize: 3 });
    expect(first.processes.map((process) => process.processId)).toEqual(["p0", "p1", "p2"]);
    // p1's record is replaced by a new process with its id: it now comes after the others.
    await service.client.startProcess({
      spec: { command: "true", processId: "p1", sessionId: "paged", autoCleanup: false },
    });
    await service.client.startProcess({
      spec: { command: "true", processId: "p5", sessionId: "paged", autoCleanup: false },
    });
    const rest = await service.client.listProcesses({
      sessionId: "paged",
      pageSize: 10,
      pageToken: first.nextPageToken,
    });
    expect(rest.processes.map((process) => process.processId)).toEqual(["p3", "p4", "p1", "p5"]);
    expect(rest.nextPageToken).toBe("");
    await waitForExit(service.client, "p1");
    await waitForExit(service.client, "p5");
  });

  it("refuses a token that is malformed, of another filter, or of another daemon run (INVALID_ARGUMENT, field page_token)", async () => {
    const { nextPageToken } = await service.client.listProcesses({ sessionId: "paged", pageSize: 1 });
    expect(nextPageToken).not.toBe("");
    const invalid = { code: Code.InvalidArgument, reason: "INVALID_ARGUMENT", metadata: { field: "page_token" } };
    expectReason(await rpcError(service.client.listProcesses({ sessionId: "paged", pageToken: "garbage!" })), invalid);
    expectReason(
      await rpcError(service.client.listProcesses({ sessionId: "other", pageToken: nextPageToken })),
      invalid,
    );
    expectReason(
      await rpcError(
        service.client.listProcesses({
          sessionId: "paged",
          statuses: [ProcessStatus.COMPLETED],
          pageToken: nextPageToken,
        }),
      ),
      invalid,
    );
    // A token outlives neither a restart nor another daemon.
    expectReason(await rpcError(s.client.listProcesses({ sessionId: "paged", pageToken: nextPageToken })), {
      ...invalid,
      message: /another run of the daemon/,
    });
    // The same filter with statuses in another order is the same filter.
    const byStatus = await service.client.listProcesses({
      statuses: [ProcessStatus.COMPLETED, ProcessStatus.FAILED],
      pageSize: 1,
    });
    const next = await service.client.listProcesses({
      statuses: [ProcessStatus.FAILED, ProcessStatus.COMPLETED],
      pageSize: 1,
      pageToken: byStatus.nextPageToken,
    });
    expect(next.processes).toHaveLength(1);
  });

  it("takes 0 as the default size and caps larger sizes at the maximum; a negative size is INVALID_ARGUMENT", async () => {
    expect([
      pageSize(0),
      pageSize(1),
      pageSize(maxListPageSize),
      pageSize(maxListPageSize + 1),
      pageSize(2 ** 31 - 1),
    ]).toEqual([defaultListPageSize, 1, maxListPageSize, maxListPageSize, maxListPageSize]);
    expectReason(await rpcError(service.client.listProcesses({ pageSize: -1 })), {
      code: Code.InvalidArgument,
      reason: "INVALID_ARGUMENT",
      metadata: { field: "page_size" },
    });
  });
});

describe("refusals through the router carry the same ErrorInfo as over the network", () => {
  it("validation, unknown processes and input preconditions", async () => {
    expectReason(await streamError(s.client.exec({ spec: { command: "" } })), {
      code: Code.InvalidArgument,
      reason: "INVALID_ARGUMENT",
      metadata: { field: "command" },
    });
    expectReason(await rpcError(s.client.getProcess({ processId: "ghost" })), {
      code: Code.NotFound,
      reason: "PROCESS_NOT_FOUND",
      metadata: { process_id: "ghost" },
    });
    expectReason(
      await rpcError(
        s.client.startProcess({ spec: { command: "true", stdinData: new Uint8Array(8 * 1024 * 1024 + 1) } }),
      ),
      {
        code: Code.InvalidArgument,
        reason: "INVALID_ARGUMENT",
        metadata: { field: "stdin_data" },
      },
    );
  });
});
