import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxService, type SendInputRequestSchema } from "../gen/sandbox/v1/sandbox_pb.js";
import { startDaemonProcess, type DaemonProcess } from "./support/daemon-process.js";
import { waitFor } from "./support/processes.js";
import { createUncompressedClient, type SandboxClient, sleepMarker, sleepers } from "./support/rpc.js";

// Memory exhaustion by a client with the token, against a daemon process started as an operator
// starts it, with a small budget (--max-retained-bytes) so the attacks are fast: the daemon's RSS
// stays within the budget plus what the transport holds per call plus a fixed allowance, and comes
// back near idle once the attack is over.

const mib = 1024 * 1024;
/** The daemon's HTTP/2 receive window per stream (server.ts): what a client may send that the daemon has not read. */
const streamWindowBytes = 4 * mib;
/** Room for everything else a busy daemon holds: its processes' bookkeeping and pipes, and dropped output V8 has not collected yet (it collects external memory every 64 MiB or so). */
const fixedAllowanceBytes = 128 * mib;
/** How close to its idle RSS the daemon must come back once an attack is over. */
const nearIdleBytes = 32 * mib;

type InputMessage = MessageInitShape<typeof SendInputRequestSchema>;

/** The daemon's resident set, in bytes, from /proc. */
function rss(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (match === null) throw new Error(`no VmRSS for ${pid}`);
  return Number(match[1]) * 1024;
}

/** A value of the daemon's /metrics (loopback, no token). */
async function metric(daemon: DaemonProcess, line: RegExp): Promise<number> {
  const match = line.exec(await (await fetch(`${daemon.url}/metrics`)).text());
  if (match === null) throw new Error(`no ${line} in /metrics`);
  return Number(match[1]);
}

/** A daemon with a budget of `budgetBytes`, and its RSS once the reclaim after its start has run. */
async function startIdleDaemon(
  budgetBytes: number,
): Promise<{ daemon: DaemonProcess; workspace: string; idle: number }> {
  const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-memory-"));
  const daemon = await startDaemonProcess(["--workspace", workspace, "--max-retained-bytes", String(budgetBytes)]);
  await waitFor(async () => (await metric(daemon, /^sandboxd_memory_reclaims_total (\d+)$/m)) >= 1, {
    timeoutMs: 15_000,
    intervalMs: 100,
    what: "the reclaim after the start",
  });
  expect(await metric(daemon, /^sandboxd_memory_budget_bytes\{kind="limit"\} (\d+)$/m)).toBe(budgetBytes);
  return { daemon, workspace, idle: rss(daemon.child.pid!) };
}

async function stopDaemon(daemon: DaemonProcess | undefined, workspace: string | undefined): Promise<void> {
  daemon?.child.kill("SIGTERM");
  await daemon?.exited();
  if (workspace !== undefined) rmSync(workspace, { recursive: true, force: true });
}

/**
 * Polls until `settled` has held for `stableFor` polls in a row (bounded), sampling the daemon's
 * RSS at every poll; returns the highest sample.
 */
async function peakRssUntil(
  pid: number,
  settled: () => boolean | Promise<boolean>,
  what: string,
  stableFor = 10,
): Promise<number> {
  let peak = 0;
  let stable = 0;
  await waitFor(
    async () => {
      peak = Math.max(peak, rss(pid));
      stable = (await settled()) ? stable + 1 : 0;
      return stable >= stableFor;
    },
    { timeoutMs: 60_000, intervalMs: 100, what },
  );
  return peak;
}

const format = (bytes: number) => `${(bytes / mib).toFixed(0)} MiB`;

describe("stdin input read ahead counts in bytes, against the process's stdin and the daemon's budget", () => {
  const budget = 16 * mib;
  let daemon: DaemonProcess | undefined;
  let workspace: string | undefined;
  let idle = 0;
  let connection: ReturnType<typeof createUncompressedClient>;
  beforeAll(async () => {
    ({ daemon, workspace, idle } = await startIdleDaemon(budget));
    connection = createUncompressedClient(daemon.url);
  });
  afterAll(async () => {
    connection?.close();
    await stopDaemon(daemon, workspace);
  });

  /** A client on a connection of its own whose HTTP/2 session may queue what it is told to send. */
  function attacker(): { client: SandboxClient; close(): void } {
    const sessionManager = new Http2SessionManager(daemon!.url, undefined, { maxSessionMemory: 4096 });
    return {
      client: createClient(
        SandboxService,
        createGrpcTransport({ baseUrl: daemon!.url, sessionManager, acceptCompression: [] }),
      ),
      close: () => sessionManager.abort(),
    };
  }

  it("6 streams of 4 MiB messages to 3 processes that do not read: RSS within the budget, back near idle after", async () => {
    const marker = sleepMarker();
    const ids: string[] = [];
    for (let index = 0; index < 3; index++) {
      ids.push(
        (await connection.client.startProcess({ spec: { command: "sleep", args: [marker], stdin: true } })).process!
          .processId,
      );
    }
    const message = new Uint8Array(4 * mib - 64);
    const streams = 6;
    const sent = new Array<number>(streams).fill(0);
    const stop = new AbortController();
    const clients = Array.from({ length: streams }, attacker);
    const calls = clients.map(async ({ client }, index) => {
      async function* requests(): AsyncGenerator<InputMessage> {
        yield { input: { case: "open", value: { processId: ids[index % ids.length] } } };
        // More than the daemon could ever hold: 64 messages (256 MiB) per stream.
        for (let count = 0; count < 64 && !stop.signal.aborted; count++) {
          yield { input: { case: "data", value: message } };
          sent[index]++;
        }
      }
      try {
        for await (const _ of client.sendInput(requests(), { signal: stop.signal }));
      } catch {
        // Ends when the test aborts it.
      }
    });
    const pid = daemon!.child.pid!;
    let last = -1;
    // Until the budget is full and no stream gets another message out for a second: the daemon stopped reading them all.
    const peak = await peakRssUntil(
      pid,
      async () => {
        const total = sent.reduce((sum, count) => sum + count, 0);
        const full = (await metric(daemon!, /^sandboxd_memory_budget_bytes\{kind="used"\} (\d+)$/m)) >= budget;
        const settled = full && total === last;
        last = total;
        return settled;
      },
      "the streams to stall",
    );
    // Per call, HTTP/2 holds its window and connect the message it is reading; the daemon the one it read last.
    const allowed = budget + streams * (streamWindowBytes + 2 * message.length) + fixedAllowanceBytes;
    console.log(
      `stdin attack: idle ${format(idle)}, peak ${format(peak)} (+${format(peak - idle)}, allowed +${format(allowed)}); messages sent ${sent.join(", ")}`,
    );
    expect(peak - idle).toBeLessThanOrEqual(allowed);
    // Each process got at most its stdin's 8 MiB and one message per stream beyond: the budget, not the streams, bounds them.
    expect(await metric(daemon!, /^sandboxd_memory_budget_bytes\{kind="used"\} (\d+)$/m)).toBeLessThanOrEqual(
      budget + streams * message.length,
    );

    stop.abort();
    await Promise.all(calls);
    for (const attack of clients) attack.close();
    await connection.client.killAllProcesses({ signal: "SIGKILL" });
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleepers to go" });
    await waitFor(async () => (await metric(daemon!, /^sandboxd_memory_budget_bytes\{kind="used"\} (\d+)$/m)) === 0, {
      what: "the pending input to go",
    });
    const after = await waitFor(() => (rss(pid) <= idle + nearIdleBytes ? rss(pid) : 0), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: `RSS back within ${format(nearIdleBytes)} of idle`,
    });
    console.log(`stdin attack: RSS ${format(after)} after (idle ${format(idle)})`);
  });

  it("backpressure loses nothing: two streams of 16 MiB each, twice the budget, reach a reader whole", async () => {
    const { process } = await connection.client.startProcess({
      spec: { command: "wc -c", stdin: true, autoCleanup: false },
    });
    const processId = process!.processId;
    const chunk = new Uint8Array(mib).fill(120);
    const writers = [attacker(), attacker()];
    await Promise.all(
      writers.map(async ({ client }) => {
        async function* requests(): AsyncGenerator<InputMessage> {
          yield { input: { case: "open", value: { processId } } };
          for (let count = 0; count < 16; count++) yield { input: { case: "data", value: chunk } };
        }
        let acks = 0;
        for await (const _ of client.sendInput(requests())) acks++;
        expect(acks).toBe(17);
      }),
    );
    for (const writer of writers) writer.close();
    async function* closing(): AsyncGenerator<InputMessage> {
      yield { input: { case: "open", value: { processId } } };
      yield { input: { case: "close", value: {} } };
    }
    for await (const _ of connection.client.sendInput(closing()));
    await waitFor(async () => (await connection.client.getProcess({ processId })).process?.exit !== undefined, {
      what: "wc to exit",
    });
    const { stdout } = await connection.client.getProcessLogs({ processId });
    expect(Buffer.from(stdout).toString().trim()).toBe(String(32 * mib));
  });
});

describe("retained output of live processes counts against the daemon's budget", () => {
  const budget = 32 * mib;
  let daemon: DaemonProcess | undefined;
  let workspace: string | undefined;
  let idle = 0;
  let connection: ReturnType<typeof createUncompressedClient>;
  beforeAll(async () => {
    ({ daemon, workspace, idle } = await startIdleDaemon(budget));
    connection = createUncompressedClient(daemon.url);
  });
  afterAll(async () => {
    connection?.close();
    await stopDaemon(daemon, workspace);
  });

  it("40 live processes and 12 unread Execs of 8 MiB each: RSS within the budget, nothing an Exec caller reads is lost, back near idle after", async () => {
    const client = connection.client;
    const size = 8 * mib;
    // 416 MiB in all, thirteen times the budget.
    const backgroundCount = 40;
    const execCount = 12;
    const marker = sleepMarker();
    const quiet = (await client.startProcess({ spec: { command: `printf quiet-output; sleep ${marker}` } })).process!
      .processId;
    const background: string[] = [];
    for (let index = 0; index < backgroundCount; index++) {
      background.push(
        (await client.startProcess({ spec: { command: `head -c ${size} /dev/zero; sleep ${marker}` } })).process!
          .processId,
      );
    }
    // Callers who take the first event and then read nothing: their output is never dropped, so it
    // must not pile up either.
    const execs = Array.from({ length: execCount }, () =>
      client.exec({ spec: { command: `head -c ${size} /dev/zero` } })[Symbol.asyncIterator](),
    );
    for (const exec of execs) expect((await exec.next()).value?.event.case).toBe("started");

    const pid = daemon!.child.pid!;
    const began = performance.now();
    const peak = await peakRssUntil(
      pid,
      async () => {
        const { processes } = await client.listProcesses({});
        return background.every((id) => processes.find((info) => info.processId === id)?.stdoutBytes === BigInt(size));
      },
      "every background process to write its output",
      3,
    );
    const allowed = budget + fixedAllowanceBytes;
    console.log(
      `output attack: idle ${format(idle)}, peak ${format(peak)} (+${format(peak - idle)}, allowed +${format(allowed)})`,
    );
    expect(peak - idle).toBeLessThanOrEqual(allowed);
    // What Exec callers have not read is never dropped: held to the budget before it filled, and to
    // their shares of it after, so at most twice the budget, plus a chunk or two per buffer.
    expect(await metric(daemon!, /^sandboxd_memory_budget_bytes\{kind="used"\} (\d+)$/m)).toBeLessThanOrEqual(
      2 * budget + (backgroundCount + execCount) * 128 * 1024,
    );
    // The quiet process kept its output; a flooded one tells its reader what it dropped.
    expect(Buffer.from((await client.getProcessLogs({ processId: quiet })).stdout).toString()).toBe("quiet-output");
    const flooded = await client.getProcessLogs({ processId: background[0] });
    expect(Number(flooded.stdoutOffset) + flooded.stdout.length).toBe(size);
    expect(flooded.stdoutOffset).toBeGreaterThan(0n);

    // Read the Execs now: every byte arrives, in order, nothing dropped.
    const received = await Promise.all(
      execs.map(async (exec) => {
        let bytes = 0;
        for (let next = await exec.next(); !next.done; next = await exec.next()) {
          const event = next.value.event;
          if (event.case === "output") {
            expect(event.value.offset).toBe(BigInt(bytes));
            bytes += event.value.data.length;
          }
          if (event.case === "exited") expect(event.value.exitCode).toBe(0);
        }
        return bytes;
      }),
    );
    expect(received).toEqual(new Array(execCount).fill(size));
    console.log(`output attack: written and read in ${((performance.now() - began) / 1000).toFixed(1)} s`);

    await client.killAllProcesses({ signal: "SIGKILL" });
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleepers to go" });
    await waitFor(
      async () => (await client.listProcesses({ statuses: [] })).processes.every((info) => info.exit !== undefined),
      { what: "every exit" },
    );
    expect((await client.cleanupProcesses({})).removedCount).toBeGreaterThanOrEqual(backgroundCount + 1);
    const after = await waitFor(() => (rss(pid) <= idle + nearIdleBytes ? rss(pid) : 0), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: `RSS back within ${format(nearIdleBytes)} of idle`,
    });
    console.log(`output attack: RSS ${format(after)} after (idle ${format(idle)})`);
  }, 180_000);
});
