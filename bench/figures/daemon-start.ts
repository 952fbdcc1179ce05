import { spawnSync } from "node:child_process";
import { startDaemon } from "../daemon.js";
import type { Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { percentile } from "../stats.js";

/**
 * Milliseconds from spawning the daemon to its health check answering SERVING (or, while the
 * daemon has no health service, to its first successful RPC), median of `startRuns` starts,
 * beside `node -e 0` run to its exit. `entry` is the bundled daemon; the same through tsx
 * (`npm start`) is reported for information.
 */
export async function measureDaemonStart(size: BenchSize, entry: string): Promise<Row[]> {
  const bundled: number[] = [];
  const viaTsx: number[] = [];
  const baseline: number[] = [];
  let probe = "";
  for (let run = 0; run < size.startRuns; run++) {
    const started = performance.now();
    spawnSync(process.execPath, ["-e", "0"]);
    baseline.push(performance.now() - started);
    const daemon = await startDaemon({ entry });
    bundled.push(daemon.startMs);
    probe = daemon.probe === "health" ? "health SERVING" : "first successful RPC (no health service yet)";
    await daemon.stop();
    const tsxDaemon = await startDaemon();
    viaTsx.push(tsxDaemon.startMs);
    await tsxDaemon.stop();
  }
  const value = percentile(bundled, 0.5);
  const base = percentile(baseline, 0.5);
  const beyond = value - base;
  return [
    {
      id: "daemon-start",
      figure: "daemon start to ready (bundle)",
      unit: "ms",
      value,
      baseline: base,
      ratio: beyond,
      goal: "< 300 ms beyond",
      verdict: beyond < 300 ? "pass" : "fail",
      note: `median of ${size.startRuns}, ready = ${probe}; baseline node -e 0 to exit`,
    },
    {
      id: "daemon-start-tsx",
      figure: "daemon start to ready (tsx, npm start)",
      unit: "ms",
      value: percentile(viaTsx, 0.5),
      baseline: base,
      ratio: percentile(viaTsx, 0.5) - base,
      goal: "- beyond",
      verdict: "info",
      note: "TypeScript compiled on the fly by tsx; for information",
    },
  ];
}
