import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../../gen/google/rpc/error_details_pb.js";
import type { ProcessExited } from "../../../gen/sandbox/v1/sandbox_pb.js";
import { CommandFinished } from "./command-finished.js";
import type { CommandEvent, CommandSource } from "./command-source.js";
import { CommandStream, type SettledState, type StreamTarget } from "./command-stream.js";
import { SandboxError } from "./errors.js";
import type { OutputOffsets } from "./output.js";
import type { ReconnectSettings } from "./reconnect-policy.js";

// The command stream below any server: a scripted source stands in for the daemon's calls, a target
// that counts bytes stands in for the handle.

/** One scripted call: the events it yields, then how it ends (undefined: the stream just ends). */
interface Call {
  events: CommandEvent[];
  failWith?: unknown;
  /** Runs when the call is opened, before its events: a GOAWAY arriving meanwhile, say. */
  onOpen?: () => void;
}

/** A source that plays `calls` in order, one per open(), recording where each was opened from. */
function scriptedSource(calls: Call[], resumable = true): CommandSource & { opens: OutputOffsets[] } {
  const opens: OutputOffsets[] = [];
  return {
    resumable,
    opens,
    async *open(from) {
      opens.push({ ...from });
      const call = calls.shift();
      if (call === undefined) throw new Error("the test scripted no more calls");
      call.onOpen?.();
      for (const event of call.events) yield event;
      if (call.failWith !== undefined) throw call.failWith;
    },
  };
}

/** A target that counts stdout bytes (its offsets) and finishes at the exit. */
function countingTarget(): StreamTarget & { received: number } {
  const target = {
    received: 0,
    offsets: () => ({ stdout: target.received, stderr: 0 }),
    async apply(event: CommandEvent) {
      if (event.kind === "output") target.received += event.chunk.data.length;
      if (event.kind !== "exited") return undefined;
      const now = new Date();
      const exit = {
        status: "completed" as const,
        exitCode: 0,
        timedOut: false,
        killRequested: false,
        startTime: now,
        endTime: now,
        durationMs: 0,
        stdoutBytes: target.received,
        stderrBytes: 0,
        cause: "exited" as const,
        dropped: [],
      };
      return new CommandFinished("p", "true", exit, []);
    },
  };
  return target;
}

const output = (text: string): CommandEvent => ({
  kind: "output",
  chunk: { stream: "stdout", data: Buffer.from(text), offset: 0 },
});
const exited: CommandEvent = { kind: "exited", exited: {} as ProcessExited };

/** A connection that broke: UNAVAILABLE with no answer from the daemon. */
const connectionLost = () => new ConnectError("connection reset", Code.Unavailable);

/** An answer of the daemon: its code and a `sandbox.v1` ErrorInfo with `reason`. */
function daemonAnswer(code: Code, reason: string): ConnectError {
  const error = new ConnectError(reason.toLowerCase(), code);
  error.details.push({ desc: ErrorInfoSchema, value: { reason, domain: "sandbox.v1" } });
  return error;
}

const settings = (overrides: Partial<ReconnectSettings> = {}): (() => ReconnectSettings) => {
  return () => ({ maxAttempts: 5, backoffBaseMs: 1, backoffMaxMs: 1, ...overrides });
};

/** Builds a stream; `settledWith` holds the final state once it comes. */
function streamOf(source: CommandSource, target: StreamTarget, reconnect: () => ReconnectSettings, goAways = () => 0) {
  const settledWith: SettledState[] = [];
  const stream = new CommandStream(source, target, goAways, reconnect, (state) => settledWith.push(state));
  return { stream, settledWith };
}

/** Waits, a turn of the event loop at a time, until `condition` holds (at most 1,000 turns). */
async function turnsUntil(condition: () => boolean): Promise<void> {
  for (let turn = 0; turn < 1000 && !condition(); turn++) await new Promise((resolve) => setImmediate(resolve));
  expect(condition()).toBe(true);
}

describe("CommandStream with a scripted source", () => {
  it("resumes a broken call from the target's offsets and settles with the exit", async () => {
    const source = scriptedSource([
      { events: [output("abc")], failWith: connectionLost() },
      { events: [output("de"), exited] },
    ]);
    const target = countingTarget();
    const { stream, settledWith } = streamOf(source, target, settings());
    const finished = await stream.follow();
    expect(finished.exit.stdoutBytes).toBe(5);
    expect(source.opens).toEqual([
      { stdout: 0, stderr: 0 },
      { stdout: 3, stderr: 0 },
    ]);
    expect(stream.reconnectCount).toBe(1);
    expect(settledWith.map((state) => state.t)).toEqual(["exited"]);
  });

  it("backs off with equal jitter after a transient failure, and stop() ends the wait", async () => {
    const source = scriptedSource([{ events: [], failWith: connectionLost() }]);
    const { stream, settledWith } = streamOf(
      source,
      countingTarget(),
      settings({ backoffBaseMs: 60_000, backoffMaxMs: 60_000 }),
    );
    const following = stream.follow().catch((reason: unknown) => reason);
    await turnsUntil(() => stream.state.t === "backing-off");
    const state = stream.state as Extract<typeof stream.state, { t: "backing-off" }>;
    expect(state.attempt).toBe(1);
    expect(state.delayMs).toBeGreaterThanOrEqual(30_000);
    expect(state.delayMs).toBeLessThanOrEqual(60_000);
    stream.stop("detached");
    expect(await following).toBe("detached");
    expect(settledWith).toEqual([{ t: "stopped", reason: "detached" }]);
    expect(source.opens).toHaveLength(1);
  });

  it("resumes at once, without the backoff, when a graceful GOAWAY came during the call", async () => {
    let goAways = 0;
    const source = scriptedSource([
      { events: [output("a")], failWith: connectionLost(), onOpen: () => goAways++ },
      { events: [exited] },
    ]);
    const { stream } = streamOf(
      source,
      countingTarget(),
      settings({ backoffBaseMs: 60_000, backoffMaxMs: 60_000 }),
      () => goAways,
    );
    await stream.follow();
    expect(source.opens).toHaveLength(2);
  });

  it("resumes at once when the daemon says it is shutting down (SHUTTING_DOWN)", async () => {
    const source = scriptedSource([
      { events: [], failWith: daemonAnswer(Code.Unavailable, "SHUTTING_DOWN") },
      { events: [exited] },
    ]);
    const { stream } = streamOf(source, countingTarget(), settings({ backoffBaseMs: 60_000, backoffMaxMs: 60_000 }));
    await stream.follow();
    expect(stream.reconnectCount).toBe(1);
  });

  it("gives up after maxAttempts consecutive failures with UNAVAILABLE, never a hang", async () => {
    const source = scriptedSource(Array.from({ length: 3 }, () => ({ events: [], failWith: connectionLost() })));
    const { stream, settledWith } = streamOf(source, countingTarget(), settings({ maxAttempts: 2 }));
    const error = await stream.follow().catch((reason: unknown) => reason);
    expect(error).toBeInstanceOf(SandboxError);
    expect(error).toMatchObject({
      code: "UNAVAILABLE",
      message: expect.stringMatching(/gave up after 2 reconnect attempts/),
    });
    expect(source.opens).toHaveLength(3);
    expect(settledWith[0].t).toBe("failed");
  });

  it("counts only consecutive failures: an event in between starts the count again", async () => {
    const source = scriptedSource([
      { events: [output("a")], failWith: connectionLost() },
      { events: [output("b")], failWith: connectionLost() },
      { events: [output("c")], failWith: connectionLost() },
      { events: [exited] },
    ]);
    const { stream } = streamOf(source, countingTarget(), settings({ maxAttempts: 1 }));
    expect((await stream.follow()).exit.stdoutBytes).toBe(3);
    expect(stream.reconnectCount).toBe(3);
  });

  it("reads the settings at each failure, so a change applies to a stream already running", async () => {
    let maxAttempts = 5;
    const source = scriptedSource(Array.from({ length: 2 }, () => ({ events: [], failWith: connectionLost() })));
    const { stream } = streamOf(source, countingTarget(), () => ({ maxAttempts, backoffBaseMs: 1, backoffMaxMs: 1 }));
    maxAttempts = 1;
    await expect(stream.follow()).rejects.toMatchObject({
      message: expect.stringMatching(/gave up after 1 reconnect attempts/),
    });
  });

  it("does not reopen a source that cannot resume (Exec): a lost call is UNAVAILABLE", async () => {
    const source = scriptedSource([{ events: [output("a")], failWith: connectionLost() }], false);
    const { stream } = streamOf(source, countingTarget(), settings());
    await expect(stream.follow()).rejects.toMatchObject({ name: "SandboxError", code: "UNAVAILABLE" });
    expect(source.opens).toHaveLength(1);
  });

  it("ends at once on the daemon's refusal (NOT_FOUND), on a stream without an exit, and after refuseReconnects()", async () => {
    const refused = streamOf(
      scriptedSource([{ events: [], failWith: daemonAnswer(Code.NotFound, "PROCESS_NOT_FOUND") }]),
      countingTarget(),
      settings(),
    );
    await expect(refused.stream.follow()).rejects.toMatchObject({ name: "ProcessNotFoundError" });

    const noExit = streamOf(scriptedSource([{ events: [output("a")] }]), countingTarget(), settings());
    await expect(noExit.stream.follow()).rejects.toMatchObject({ code: "NO_EXIT" });

    const killedSource = scriptedSource([{ events: [], failWith: connectionLost() }]);
    const killed = streamOf(killedSource, countingTarget(), settings());
    killed.stream.refuseReconnects();
    await expect(killed.stream.follow()).rejects.toBeInstanceOf(SandboxError);
    expect(killedSource.opens).toHaveLength(1);
  });

  it("stopped before it was followed, it settles as stopped and never opens the source", async () => {
    const source = scriptedSource([]);
    const { stream, settledWith } = streamOf(source, countingTarget(), settings());
    stream.stop("gone");
    await expect(stream.follow()).rejects.toBe("gone");
    expect(settledWith).toEqual([{ t: "stopped", reason: "gone" }]);
    expect(source.opens).toEqual([]);
  });
});
