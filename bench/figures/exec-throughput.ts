import { spawnAndRead } from "../baseline.js";
import type { Daemon } from "../daemon.js";
import { ratioRow, type Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { megabytesPerSecond, timeMs } from "../stats.js";

/**
 * `head -c N /dev/zero` through Exec to the client, in MB/s, beside the same command's stdout read
 * from a raw Node pipe in the bench process. Every byte is counted on arrival; a short count fails.
 */
export async function measureExecThroughput(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const bytes = size.execBytes;
  let received = 0;
  const sandboxdMs = await timeMs(async () => {
    for await (const event of daemon.client.exec({ spec: { command: "head", args: ["-c", String(bytes), "/dev/zero"] } })) {
      if (event.event.case === "output") received += event.event.value.data.length;
    }
  });
  let baselineBytes = 0;
  const baselineMs = await timeMs(async () => (baselineBytes = await spawnAndRead("head", ["-c", String(bytes), "/dev/zero"])));
  const complete = received === bytes && baselineBytes === bytes;
  return [
    ratioRow(
      {
        id: "exec-throughput",
        figure: `${formatBytes(bytes)} from head -c through Exec`,
        unit: "MB/s",
        value: megabytesPerSecond(received, sandboxdMs),
        baseline: megabytesPerSecond(baselineBytes, baselineMs),
        note: complete ? `${received} bytes each` : `short read: ${received} via Exec, ${baselineBytes} via the pipe, of ${bytes}`,
      },
      "min",
      0.5,
      complete,
    ),
  ];
}

/** "1 GiB", "8 MiB". */
export function formatBytes(bytes: number): string {
  if (bytes >= 1024 ** 3 && bytes % 1024 ** 3 === 0) return `${bytes / 1024 ** 3} GiB`;
  return `${Math.round(bytes / 1024 ** 2)} MiB`;
}
