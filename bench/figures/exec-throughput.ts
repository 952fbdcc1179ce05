import { spawnAndRead } from "../baseline.js";
import type { Daemon } from "../daemon.js";
import { ratioRow, type Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { megabytesPerSecond, timeMs } from "../stats.js";

/**
 * `head -c N /dev/zero` through Exec to the client, in MB/s, beside the same command's stdout read
 * from a raw Node pipe in the bench process. Every byte is counted on arrival; a short count fails.
 * Also the mean size of the output messages the daemon sent (it merges what a reader has not yet
 * taken, up to 1 MiB a message).
 */
export async function measureExecThroughput(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const bytes = size.execBytes;
  const through = async (client: Daemon["client"]) => {
    let received = 0;
    let messages = 0;
    const cpuBefore = daemon.cpuMs();
    const elapsedMs = await timeMs(async () => {
      for await (const event of client.exec({ spec: { command: "head", args: ["-c", String(bytes), "/dev/zero"] } })) {
        if (event.event.case === "output") {
          received += event.event.value.data.length;
          messages++;
        }
      }
    });
    return { received, messages, elapsedMs, cpuMs: daemon.cpuMs() - cpuBefore };
  };
  const grpc = await through(daemon.client);
  const http1 = await through(daemon.http1Client);
  let baselineBytes = 0;
  const baselineMs = await timeMs(
    async () => (baselineBytes = await spawnAndRead("head", ["-c", String(bytes), "/dev/zero"])),
  );
  const complete = (received: number) => received === bytes && baselineBytes === bytes;
  const note = (received: number) =>
    complete(received)
      ? `${received} bytes each`
      : `short read: ${received} via Exec, ${baselineBytes} via the pipe, of ${bytes}`;
  const cpuPerMb = grpc.cpuMs / (bytes / 1e6);
  return [
    ratioRow(
      {
        id: "exec-throughput",
        figure: `${formatBytes(bytes)} from head -c through Exec`,
        unit: "MB/s",
        value: megabytesPerSecond(grpc.received, grpc.elapsedMs),
        baseline: megabytesPerSecond(baselineBytes, baselineMs),
        note: note(grpc.received),
      },
      "min",
      0.4,
      complete(grpc.received),
    ),
    ratioRow(
      {
        id: "exec-throughput-http1",
        figure: `${formatBytes(bytes)} through Exec, Connect/HTTP1.1`,
        unit: "MB/s",
        value: megabytesPerSecond(http1.received, http1.elapsedMs),
        baseline: megabytesPerSecond(baselineBytes, baselineMs),
        note: note(http1.received),
      },
      "min",
      0.4,
      complete(http1.received),
    ),
    {
      id: "exec-cpu-per-mb",
      figure: "daemon CPU per MB of output (gRPC)",
      unit: "ms",
      value: cpuPerMb,
      baseline: null,
      ratio: null,
      goal: "<= 1.5 ms",
      verdict: cpuPerMb <= 1.5 ? "pass" : "fail",
      note: "user + system time of the daemon process over the gRPC run",
    },
    {
      id: "exec-message-bytes",
      figure: "mean output message through Exec (gRPC)",
      unit: "KB",
      value: grpc.messages === 0 ? 0 : grpc.received / grpc.messages / 1000,
      baseline: null,
      ratio: null,
      goal: "-",
      verdict: "info",
      note: `${grpc.messages} output messages for ${grpc.received} bytes; Connect/HTTP1.1: ${http1.messages}`,
    },
  ];
}

/** "1 GiB", "8 MiB". */
export function formatBytes(bytes: number): string {
  if (bytes >= 1024 ** 3 && bytes % 1024 ** 3 === 0) return `${bytes / 1024 ** 3} GiB`;
  return `${Math.round(bytes / 1024 ** 2)} MiB`;
}
