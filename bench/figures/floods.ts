import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { createClient } from "@connectrpc/connect";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { createSandboxConnection } from "../../src/client/core/transport.js";
import { readCpuMs, repoRoot, type Daemon } from "../daemon.js";
import type { Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { percentile, timeMs } from "../stats.js";
import { execTrue } from "../exec-true.js";

/** The token the flood figures' daemon is started with (`--token`). */
export const floodToken = "bench-flood-token";

/** What a flood client reported when it stopped. */
interface FloodReport {
  answers: Record<string, number>;
  answered: number;
  connectionsMade: number;
  seconds: number;
  /** CPU time the flood client used, in milliseconds (read from /proc before it exits). */
  cpuMs: number;
}

/**
 * An honest caller's exec("true") during floods from the same machine, each run by
 * bench/flood-client.ts in a process of its own: `size.floodConnections` connections x
 * `size.floodStreams` calls in flight, first unauthenticated Execs (headers, no token, no body), then
 * grpc.health.v1.Health/Watch streams (no token needed). The baseline of each is the same client's
 * p99 with no flood, measured just before. The daemon must have been started with `--token
 * floodToken`.
 */
export async function measureFloods(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const connection = createSandboxConnection({ baseUrl: daemon.url, token: floodToken, acceptCompression: false });
  const client = createClient(SandboxService, connection.transport);
  const sample = async () => {
    const times: number[] = [];
    for (let index = 0; index < size.floodCalls; index++) times.push(await timeMs(() => execTrue(client)));
    return times;
  };
  try {
    for (let index = 0; index < 10; index++) await execTrue(client);
    const rows: Row[] = [];
    for (const kind of ["unauthenticated", "watch"] as const) {
      const quiet = await sample();
      const flood = await startFlood(daemon.url, kind, size.floodConnections, size.floodStreams);
      let during: number[];
      let report: FloodReport;
      const cpuBefore = daemon.cpuMs();
      const floodBegan = performance.now();
      try {
        during = await sample();
      } finally {
        report = await flood.stop();
      }
      const floodMs = performance.now() - floodBegan;
      const daemonCpu = (daemon.cpuMs() - cpuBefore) / floodMs;
      const attackerCpu = report.cpuMs / (report.seconds * 1000);
      const p99 = percentile(during, 0.99);
      const answers = Object.entries(report.answers)
        .map(([status, count]) => `${status === "reset" ? "reset" : `grpc-status ${status}`}: ${count}`)
        .join(", ");
      rows.push({
        id: kind === "unauthenticated" ? "exec-p99-unauthenticated-flood" : "exec-p99-watch-flood",
        figure: `authenticated Exec p99 during ${kind === "unauthenticated" ? "unauthenticated" : "Health/Watch"} flood`,
        unit: "ms",
        value: p99,
        baseline: percentile(quiet, 0.99),
        ratio: p99 / percentile(quiet, 0.99),
        goal: "< 250 ms",
        verdict: p99 < 250 ? "pass" : "fail",
        note:
          `${during.length} sequential exec("true") calls (p50 ${percentile(during, 0.5).toFixed(1)} ms, max ${Math.max(...during).toFixed(0)} ms) while ` +
          `${size.floodConnections} connections x ${size.floodStreams} streams flooded; baseline: the same calls without the flood just before; ` +
          `flood answers ${(report.answered / report.seconds).toFixed(0)}/s (${answers}), ${report.connectionsMade} connections made; ` +
          `the daemon used ${(daemonCpu * 100).toFixed(0)}% of a core meanwhile, the flood client ${(attackerCpu * 100).toFixed(0)}%`,
      });
    }
    return rows;
  } finally {
    connection.close();
  }
}

/** A running flood client. */
interface Flood {
  /** Stops it and resolves with what it saw. */
  stop(): Promise<FloodReport>;
}

/** Starts bench/flood-client.ts and resolves once every connection of it has had an answer. */
async function startFlood(url: string, kind: string, connections: number, streams: number): Promise<Flood> {
  const child: ChildProcess = spawn(
    process.execPath,
    ["--import", "tsx", path.join(repoRoot, "bench/flood-client.ts"), url, kind, String(connections), String(streams)],
    {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const lines = createInterface({ input: child.stdout! });
  const next = () =>
    new Promise<string>((resolve, reject) => {
      const onLine = (line: string) => {
        lines.off("line", onLine);
        child.off("exit", onExit);
        resolve(line);
      };
      const onExit = (code: number | null) => reject(new Error(`the flood client exited with ${code}`));
      lines.on("line", onLine);
      child.once("exit", onExit);
    });
  const ready = await next();
  if (ready !== "flooding") throw new Error(`the flood client said ${ready}`);
  return {
    async stop() {
      const report = next();
      const cpuMs = readCpuMs(child.pid!);
      child.kill("SIGTERM");
      return { ...(JSON.parse(await report) as Omit<FloodReport, "cpuMs">), cpuMs };
    },
  };
}
