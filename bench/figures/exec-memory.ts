import type { Daemon } from "../daemon.js";
import type { Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { runConcurrently } from "../stats.js";
import { execTrue } from "../exec-true.js";

/**
 * The daemon's resident memory idle, and 5 s after `size.memoryExecs` execs of `true` (4 at a time):
 * what an exec leaves behind once its caller has everything (issue 10: idle <= 50 MB, after <= idle
 * + 15 MB).
 */
export async function measureExecMemory(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const idle = daemon.rssBytes() / 1e6;
  let peak = idle;
  const sampler = setInterval(() => (peak = Math.max(peak, daemon.rssBytes() / 1e6)), 100);
  await runConcurrently(size.memoryExecs, 4, () => execTrue(daemon.client));
  clearInterval(sampler);
  await new Promise((resolve) => setTimeout(resolve, 5000));
  const after = daemon.rssBytes() / 1e6;
  return [
    {
      id: "rss-idle",
      figure: "daemon RSS idle",
      unit: "MB",
      value: idle,
      baseline: null,
      ratio: null,
      goal: "<= 50 MB",
      verdict: idle <= 50 ? "pass" : "fail",
    },
    {
      id: "rss-after-execs",
      figure: `daemon RSS 5 s after ${size.memoryExecs} execs`,
      unit: "MB",
      value: after,
      baseline: null,
      ratio: null,
      goal: "<= idle + 15 MB",
      verdict: after - idle <= 15 ? "pass" : "fail",
      note: `${(after - idle).toFixed(1)} MB over idle; peak ${peak.toFixed(1)} MB during the execs; Exec records linger 60 s`,
    },
  ];
}
