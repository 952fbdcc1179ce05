import type { Client } from "@connectrpc/connect";
import type { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import type { Daemon } from "../daemon.js";
import { ratioRow, type Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { megabytesPerSecond, percentile } from "../stats.js";
import { formatBytes } from "./exec-throughput.js";

/** What one live StreamLogs reader saw. */
interface ReaderResult {
  bytes: number;
  gaps: number;
  /** From its first output byte to its last. */
  elapsedMs: number;
}

/** Milliseconds the process waits before writing, so every reader is following when output starts. */
const startDelayMs = 700;

/**
 * One process (`head -c N /dev/zero`) followed by `readers` StreamLogs callers, each on a
 * connection of its own, one of which reads the first event and then stalls: MB/s of the slowest
 * live reader, beside one reader following the same process alone. The daemon must retain the
 * whole output (start it with `--max-output-bytes` of at least `fanoutBytes`), so no live reader
 * meets a gap; the row fails if any live reader missed a byte or the process did not finish.
 */
export async function measureLogsFanout(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const alone = await followOnce(daemon, size.fanoutBytes, 1, false);
  const crowd = await followOnce(daemon, size.fanoutBytes, size.fanoutReaders - 1, true);
  const rates = crowd.readers.map((reader) => megabytesPerSecond(reader.bytes, reader.elapsedMs));
  const aloneRate = megabytesPerSecond(alone.readers[0].bytes, alone.readers[0].elapsedMs);
  const complete = [...alone.readers, ...crowd.readers].every(
    (reader) => reader.bytes === size.fanoutBytes && reader.gaps === 0,
  );
  const aggregate = rates.reduce((sum, rate) => sum + rate, 0);
  return [
    ratioRow(
      {
        id: "logs-fanout",
        figure: `StreamLogs ${size.fanoutReaders} followers (1 stalled), slowest live`,
        unit: "MB/s",
        value: Math.min(...rates),
        baseline: aloneRate,
        note:
          `${formatBytes(size.fanoutBytes)} per reader; median live reader ${percentile(rates, 0.5).toFixed(1)} MB/s, ` +
          `all ${rates.length} together ${aggregate.toFixed(0)} MB/s; process ran ${crowd.processMs.toFixed(0)} ms with the crowd, ` +
          `${alone.processMs.toFixed(0)} ms alone; ${complete ? "every live reader got every byte" : "A LIVE READER MISSED BYTES"}` +
          (crowd.stalledFinished ? "" : "; the stalled reader was still open at the end, as it should be"),
      },
      "min",
      0.5,
      complete,
    ),
  ];
}

async function followOnce(daemon: Daemon, bytes: number, liveReaders: number, withStalled: boolean) {
  const started = await daemon.client.startProcess({
    spec: { command: `sleep ${startDelayMs / 1000}; exec head -c ${bytes} /dev/zero` },
  });
  const processId = started.process!.processId;
  const clients = Array.from({ length: liveReaders + (withStalled ? 1 : 0) }, () => daemon.newClient());
  const stalled = new AbortController();
  let stalledFinished = false;
  if (withStalled) {
    const iterator = clients
      .pop()!
      .streamLogs({ processId, follow: true }, { signal: stalled.signal })
      [Symbol.asyncIterator]();
    // Take the first event, then never ask again: HTTP/2 flow control stops its stream.
    const first = await iterator.next();
    stalledFinished = first.done === true;
  }
  const readers = await Promise.all(clients.map((client) => follow(client, processId)));
  stalled.abort();
  const info = await daemon.client.getProcess({ processId });
  const exit = info.process?.exit;
  const processMs = exit?.duration
    ? Number(exit.duration.seconds) * 1000 + exit.duration.nanos / 1e6 - startDelayMs
    : Number.NaN;
  return { readers, processMs, stalledFinished };
}

async function follow(client: Client<typeof SandboxService>, processId: string): Promise<ReaderResult> {
  let bytes = 0;
  let gaps = 0;
  let firstAt: number | undefined;
  let lastAt = 0;
  for await (const event of client.streamLogs({ processId, follow: true })) {
    if (event.event.case === "output") {
      firstAt ??= performance.now();
      bytes += event.event.value.data.length;
      lastAt = performance.now();
    } else if (event.event.case === "gap") {
      gaps++;
    }
  }
  return { bytes, gaps, elapsedMs: firstAt === undefined ? Number.NaN : lastAt - firstAt };
}
