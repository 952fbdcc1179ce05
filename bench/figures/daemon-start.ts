import { spawnSync } from "node:child_process";
import { daemonNodeFlags } from "../../src/cli/sandboxd/node-flags.js";
import { startDaemon } from "../daemon.js";
import type { Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { percentile } from "../stats.js";

/**
 * Milliseconds from spawning the daemon to its health check answering SERVING (or, while the
 * daemon has no health service, to its first successful RPC), median of `startRuns` starts,
 * beside `node -e 0` run to its exit. `entry` is the bundled daemon, started with the daemon's Node
 * flags as the image and the systemd unit start it; for information, the same without them (as the
 * `sandboxd` bin starts: the daemon restarts itself with them, see src/cli/sandboxd/relaunch.ts) and
 * through tsx (`npm start` in a checkout).
 */
export async function measureDaemonStart(size: BenchSize, entry: string): Promise<Row[]> {
  const bundled: number[] = [];
  const relaunched: number[] = [];
  const viaTsx: number[] = [];
  const baseline: number[] = [];
  let probe = "";
  for (let run = 0; run < size.startRuns; run++) {
    const started = performance.now();
    spawnSync(process.execPath, ["-e", "0"]);
    baseline.push(performance.now() - started);
    const daemon = await startDaemon({ entry, nodeArgs: [...daemonNodeFlags] });
    bundled.push(daemon.startMs);
    probe = daemon.probe === "health" ? "health SERVING" : "first successful RPC (no health service yet)";
    await daemon.stop();
    const plain = await startDaemon({ entry });
    relaunched.push(plain.startMs);
    await plain.stop();
    const tsxDaemon = await startDaemon();
    viaTsx.push(tsxDaemon.startMs);
    await tsxDaemon.stop();
  }
  const value = percentile(bundled, 0.5);
  const base = percentile(baseline, 0.5);
  const beyond = value - base;
  const info = (id: string, figure: string, samples: number[], note: string): Row => ({
    id,
    figure,
    unit: "ms",
    value: percentile(samples, 0.5),
    baseline: base,
    ratio: percentile(samples, 0.5) - base,
    goal: "- beyond",
    verdict: "info",
    note,
  });
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
      note: `median of ${size.startRuns}, ready = ${probe}; node ${daemonNodeFlags.join(" ")} <bundle>, as the image and the systemd unit start it; baseline node -e 0 to exit`,
    },
    info(
      "daemon-start-relaunch",
      "daemon start to ready (bundle, restarting for its Node flags)",
      relaunched,
      "node <bundle> without the flags, as the sandboxd bin starts: the daemon execs node again with them",
    ),
    info(
      "daemon-start-tsx",
      "daemon start to ready (tsx, npm start)",
      viaTsx,
      "TypeScript compiled on the fly by tsx; for information",
    ),
  ];
}
