import { spawn } from "node:child_process";
import { createClient, type Client } from "@connectrpc/connect";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { daemonNodeFlags } from "../../src/cli/sandboxd/node-flags.js";
import { createSandboxConnection } from "../../src/client/core/transport.js";
import { spawnAndRead } from "../baseline.js";
import { buildFloorServer } from "../build.js";
import { listeningUrl, readCpuMs, readRssBytes } from "../daemon.js";
import type { Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { megabytesPerSecond, percentile, runConcurrently, timeMs } from "../stats.js";
import { execTrue } from "../exec-true.js";

/**
 * What connect-es, protobuf-es and Node's HTTP/2 cost with nothing of sandboxd's in the way: the
 * Exec figures of exec-latency.ts and exec-throughput.ts run against bench/floor-server.ts, a
 * connect-node server with the daemon's settings and Node flags whose Exec answers at once without
 * a process. The rows are information, not goals: they show how much of each daemon figure is the
 * RPC stack the issue asks us to keep, measured in the same run with the same client.
 */
export async function measureConnectFloor(size: BenchSize, options: FloorOptions = {}): Promise<Row[]> {
  const entry = await buildFloorServer();
  const server = startFloorServer(entry);
  try {
    const connection = createSandboxConnection({
      baseUrl: await listeningUrl(server, 20_000),
      acceptCompression: false,
    });
    const client = createClient(SandboxService, connection.transport);
    // The floor server's Exec of `stream N SIZE` answers N bytes of output as SIZE-byte messages and exits.
    const streamBytes = async (count: number, messageBytes = 64 * 1024) => {
      let bytes = 0;
      const args = [String(count), String(messageBytes)];
      for await (const event of client.exec({ spec: { command: "stream", args } })) {
        if (event.event.case === "output") bytes += event.event.value.data.length;
      }
      return bytes;
    };
    const pid = server.pid!;
    const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    // As the daemon's memory figure: idle RSS 1 s after it serves, and 5 s after execs 4 at a time.
    await pause(1000);
    const rssIdle = readRssBytes(pid) / 1e6;
    for (let index = 0; index < Math.min(20, size.sequentialCalls); index++) {
      await execTrue(client);
      await spawnAndRead("true");
    }
    const calls: number[] = [];
    const spawns: number[] = [];
    const cpuBefore = readCpuMs(pid);
    for (let index = 0; index < size.sequentialCalls; index++) calls.push(await timeMs(() => execTrue(client)));
    const cpuPerCall = (readCpuMs(pid) - cpuBefore) / size.sequentialCalls;
    for (let index = 0; index < size.sequentialCalls; index++) spawns.push(await timeMs(() => spawnAndRead("true")));
    const concurrentCpuBefore = readCpuMs(pid);
    const concurrentMs = await runConcurrently(size.concurrentCalls, size.concurrency, () => execTrue(client));
    const cpuPerConcurrentCall = (readCpuMs(pid) - concurrentCpuBefore) / size.concurrentCalls;
    const spawnConcurrentMs = await runConcurrently(size.concurrentCalls, size.concurrency, () => spawnAndRead("true"));
    const streamCpuBefore = readCpuMs(pid);
    let streamed = 0;
    const streamMs = await timeMs(async () => (streamed = await streamBytes(size.execBytes)));
    const cpuPerMb = (readCpuMs(pid) - streamCpuBefore) / (streamed / 1e6);
    // The same bytes as the daemon's messages were, on average, in this run's throughput figure.
    const sameSize = options.messageBytes;
    let cpuPerMbSameSize = Number.NaN;
    if (sameSize !== undefined) {
      const before = readCpuMs(pid);
      const bytes = await streamBytes(size.execBytes, sameSize);
      cpuPerMbSameSize = (readCpuMs(pid) - before) / (bytes / 1e6);
    }
    connection.close();
    // A fresh server for the memory after calls, as the daemon's figure uses a daemon of its own.
    const rssAfter = await rssAfterCalls(entry, size);
    const info = { goal: "-", verdict: "info" } as const;
    const p50 = percentile(calls, 0.5);
    const spawnP50 = percentile(spawns, 0.5);
    const p99 = percentile(calls, 0.99);
    const spawnP99 = percentile(spawns, 0.99);
    const perSecond = (calls: number, ms: number) => calls / (ms / 1000);
    return [
      {
        id: "floor-call-p50",
        figure: "connect-es alone: Exec-shaped call, no process, p50",
        unit: "ms",
        value: p50,
        baseline: spawnP50,
        ratio: p50 / spawnP50,
        ...info,
        note: `${calls.length} calls; baseline: spawn("true") p50 in the same run`,
      },
      {
        id: "floor-call-p99",
        figure: "connect-es alone: Exec-shaped call, no process, p99",
        unit: "ms",
        value: p99,
        baseline: spawnP99,
        ratio: p99 / spawnP99,
        ...info,
        note: `${calls.length} calls; baseline: spawn("true") p99 in the same run`,
      },
      {
        id: "floor-cpu-per-call",
        figure: "connect-es alone: server CPU per call",
        unit: "ms",
        value: cpuPerCall,
        baseline: null,
        ratio: null,
        ...info,
        note: "user + system time of the floor server over the sequential calls",
      },
      {
        id: "floor-cpu-per-call-concurrent",
        figure: `connect-es alone: server CPU per call, ${size.concurrency} concurrent`,
        unit: "ms",
        value: cpuPerConcurrentCall,
        baseline: null,
        ratio: null,
        ...info,
        note: `user + system time of the floor server over the ${size.concurrentCalls} concurrent calls`,
      },
      {
        id: "floor-concurrent",
        figure: `connect-es alone: ${size.concurrency} concurrent calls`,
        unit: "calls/s",
        value: perSecond(size.concurrentCalls, concurrentMs),
        baseline: perSecond(size.concurrentCalls, spawnConcurrentMs),
        ratio: spawnConcurrentMs / concurrentMs,
        ...info,
        note: `${size.concurrentCalls} calls, one connection; baseline: spawn("true") execs/s`,
      },
      {
        id: "floor-throughput",
        figure: `connect-es alone: ${size.execBytes / 1024 ** 2} MiB as 64 KiB messages`,
        unit: "MB/s",
        value: megabytesPerSecond(streamed, streamMs),
        baseline: null,
        ratio: null,
        ...info,
        note:
          streamed === size.execBytes
            ? "one preallocated buffer, no pipe"
            : `short: ${streamed} of ${size.execBytes} bytes`,
      },
      {
        id: "floor-cpu-per-mb",
        figure: "connect-es alone: server CPU per MB",
        unit: "ms",
        value: cpuPerMb,
        baseline: null,
        ratio: null,
        ...info,
      },
      ...(sameSize === undefined
        ? []
        : [
            {
              id: "floor-cpu-per-mb-daemon-size",
              figure: `connect-es alone: server CPU per MB as ${formatKib(sameSize)} messages`,
              unit: "ms",
              value: cpuPerMbSameSize,
              baseline: null,
              ratio: null,
              ...info,
              note: "messages of the mean size the daemon sent in this run's 1 GiB through Exec",
            } satisfies Row,
          ]),
      {
        id: "floor-rss-idle",
        figure: "connect-es alone: RSS idle",
        unit: "MB",
        value: rssIdle,
        baseline: null,
        ratio: null,
        ...info,
      },
      {
        id: "floor-rss-after-calls",
        figure: `connect-es alone: RSS 5 s after ${size.memoryExecs} calls`,
        unit: "MB",
        value: rssAfter.after,
        baseline: null,
        ratio: null,
        ...info,
        note: `${(rssAfter.after - rssAfter.idle).toFixed(1)} MB over that server's idle ${rssAfter.idle.toFixed(1)} MB`,
      },
    ];
  } finally {
    server.kill("SIGKILL");
  }
}

/** Options of {@link measureConnectFloor}. */
export interface FloorOptions {
  /**
   * Also stream the output size as messages of this many bytes (the mean size of the daemon's own in
   * the same run), for the daemon's CPU per MB beside the floor's at the same message size.
   */
  messageBytes?: number;
}

/** "64 KiB", "1 MiB", "200.5 KiB". */
function formatKib(bytes: number): string {
  if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  const kib = bytes / 1024;
  return `${Number.isInteger(kib) ? kib : kib.toFixed(1)} KiB`;
}

/** The floor server with the daemon's Node flags (src/cli/sandboxd/node-flags.ts), as the daemon runs. */
function startFloorServer(entry: string, node = process.execPath) {
  return spawn(node, [...daemonNodeFlags, entry], { stdio: ["ignore", "ignore", "pipe"] });
}

/** A floor server (bench/floor-server.ts) running beside the daemon, for figures that measure both in the same rounds. */
export interface FloorServer {
  /** A client of it, on a connection of its own made as the daemon's clients are. */
  readonly client: Client<typeof SandboxService>;
  /** CPU time the floor server has used, in milliseconds. */
  cpuMs(): number;
  /** Closes the client and kills the server. */
  stop(): void;
}

/** Starts a floor server on `node` (default: the bench's own, as the daemon runs) and connects a client to it. */
export async function startFloor(node?: string): Promise<FloorServer> {
  const server = startFloorServer(await buildFloorServer(), node);
  try {
    const connection = createSandboxConnection({
      baseUrl: await listeningUrl(server, 20_000),
      acceptCompression: false,
    });
    return {
      client: createClient(SandboxService, connection.transport),
      cpuMs: () => readCpuMs(server.pid!),
      stop() {
        connection.close();
        server.kill("SIGKILL");
      },
    };
  } catch (error) {
    server.kill("SIGKILL");
    throw error;
  }
}

/** RSS of a fresh floor server idle and 5 s after `size.memoryExecs` calls, 4 in flight. */
async function rssAfterCalls(entry: string, size: BenchSize): Promise<{ idle: number; after: number }> {
  const server = startFloorServer(entry);
  try {
    const connection = createSandboxConnection({
      baseUrl: await listeningUrl(server, 20_000),
      acceptCompression: false,
    });
    const client = createClient(SandboxService, connection.transport);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const idle = readRssBytes(server.pid!) / 1e6;
    await runConcurrently(size.memoryExecs, 4, () => execTrue(client));
    await new Promise((resolve) => setTimeout(resolve, 5000));
    const after = readRssBytes(server.pid!) / 1e6;
    connection.close();
    return { idle, after };
  } finally {
    server.kill("SIGKILL");
  }
}
