/**
 * sandboxd benchmarks: what the daemon adds to running a command, each figure beside a baseline
 * measured in the same run on the bare machine (these machines are shared and noisy, so ratios
 * matter more than absolute numbers). Prints a table and writes bench/results.json.
 *
 *     npm run bench                     # the figures of issue 5 (a few minutes on 2 cores)
 *     npm run bench -- --quick          # tiny counts: proves the harness runs (seconds)
 *     npm run bench -- --only latency,throughput --cpu-prof .tmp-prof
 *
 * Flags: --quick; --only <figures> (start, latency, throughput, client, ghz, floor, memory, fanout, scale, floods, files); --out <file>
 * (default bench/results.json); --tsx (run the daemon through tsx instead of the esbuild bundle);
 * --cpu-prof <dir> (write the daemon's CPU profiles there, for `node --cpu-prof`); --node-args "<flags>"
 * (Node and V8 flags for the daemon's node, for A/B runs of a flag); --node <path> (the node binary that runs
 * the daemon and the floor server beside it, for runtime comparisons; the clients stay on the bench's node).
 * ghz is used when installed (see bench/figures/ghz.ts); its row is skipped otherwise.
 */
import { cpus, loadavg } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { buildDaemon } from "./build.js";
import { repoRoot, startDaemon, type Daemon, type DaemonOptions } from "./daemon.js";
import { measureClientMemory } from "./figures/client-memory.js";
import { measureConnectFloor } from "./figures/connect-floor.js";
import { measureDaemonStart } from "./figures/daemon-start.js";
import { measureExecLatency } from "./figures/exec-latency.js";
import { measureExecMemory } from "./figures/exec-memory.js";
import { measureExecThroughput } from "./figures/exec-throughput.js";
import { measureFiles } from "./figures/files.js";
import { floodToken, measureFloods } from "./figures/floods.js";
import { measureGhz } from "./figures/ghz.js";
import { measureLogsFanout } from "./figures/logs-fanout.js";
import { measureProcessScale } from "./figures/process-scale.js";
import { freePort, measureProcessV1Execute } from "./figures/process-v1.js";
import { formatMarkdown, formatTable, ratioRow, writeResults, type BenchResults, type Row } from "./report.js";
import { fullSize, quickSize } from "./size.js";

/** Names accepted by --only, in the order the figures run. */
export const figureNames = [
  "start",
  "latency",
  "throughput",
  "client",
  "ghz",
  "floor",
  "memory",
  "fanout",
  "scale",
  "floods",
  "files",
] as const;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean" },
      only: { type: "string" },
      out: { type: "string" },
      tsx: { type: "boolean" },
      "cpu-prof": { type: "string" },
      "node-args": { type: "string" },
      node: { type: "string" },
      markdown: { type: "boolean" },
    },
    strict: true,
  });
  const size = values.quick ? quickSize : fullSize;
  const only = new Set(values.only?.split(",").map((name) => name.trim()) ?? figureNames);
  for (const name of only) {
    if (!(figureNames as readonly string[]).includes(name))
      throw new Error(`unknown figure ${name}: use ${figureNames.join(", ")}`);
  }
  const out = path.resolve(values.out ?? path.join(repoRoot, "bench/results.json"));
  const startedAt = new Date();
  const begun = performance.now();
  const log = (message: string) => process.stderr.write(`bench: ${message}\n`);

  log("bundling the daemon");
  const entry = await buildDaemon();
  const daemonOptions = (args: string[] = []): DaemonOptions => ({
    entry: values.tsx ? undefined : entry,
    node: values.node,
    args,
    nodeArgs: [
      ...(values["node-args"]?.split(" ").filter(Boolean) ?? []),
      ...(values["cpu-prof"] ? ["--cpu-prof", `--cpu-prof-dir=${path.resolve(values["cpu-prof"])}`] : []),
    ],
  });
  const rows: Row[] = [];
  // Each daemon's peak RSS over its figures, beside its own idle RSS (1 s after it served).
  const withDaemon = async (args: string[], group: string, measure: (daemon: Daemon) => Promise<Row[]>) => {
    const daemon = await startDaemon(daemonOptions(args));
    try {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const idle = daemon.rssBytes() / 1e6;
      daemon.resetPeakRss();
      rows.push(...(await measure(daemon)));
      rows.push(peakRow(group, idle, daemon.peakRssBytes() / 1e6));
    } finally {
      await daemon.stop();
    }
  };

  if (only.has("start")) {
    log("daemon start");
    rows.push(...(await measureDaemonStart(size, entry)));
  }
  if (only.has("latency") || only.has("throughput") || only.has("client") || only.has("ghz")) {
    const grpcPort = await freePort();
    await withDaemon(["--agent-sandbox-grpc-port", String(grpcPort)], "calls", async (daemon) => {
      const measured: Row[] = [];
      if (only.has("latency")) {
        log("exec latency");
        measured.push(...(await measureExecLatency(daemon, size, values.node)));
        log("process.v1 Execute on the agent-sandbox port");
        measured.push(...(await measureProcessV1Execute(daemon, size, grpcPort)));
      }
      if (only.has("throughput")) {
        log("exec throughput");
        measured.push(...(await measureExecThroughput(daemon, size)));
      }
      if (only.has("client")) {
        log("client memory and HTTP/2 frames");
        measured.push(...(await measureClientMemory(daemon, size)));
      }
      if (only.has("ghz")) {
        log("ghz");
        measured.push(...(await measureGhz(daemon, size)));
      }
      return measured;
    });
  }
  if (only.has("floor")) {
    log("connect-es alone (the floor under the RPC figures)");
    const messageRow = rows.find((row) => row.id === "exec-message-bytes");
    const messageBytes = messageRow?.value ? Math.round((messageRow.value * 1000) / 1024) * 1024 : undefined;
    rows.push(...(await measureConnectFloor(size, { messageBytes })));
    const daemonPerMb = rows.find((row) => row.id === "exec-cpu-per-mb")?.value;
    const floorPerMb = rows.find((row) => row.id === "floor-cpu-per-mb-daemon-size")?.value;
    if (daemonPerMb != null && floorPerMb != null)
      rows.push(
        ratioRow(
          {
            id: "exec-cpu-per-mb-vs-floor",
            figure: "daemon CPU per MB beside connect-es alone's at the same message size",
            unit: "ms",
            value: daemonPerMb,
            baseline: floorPerMb,
            note: `messages of ${messageBytes} bytes on the floor server, the daemon's mean in this run`,
          },
          "max",
          1.2,
        ),
      );
  }
  if (only.has("memory")) {
    log("daemon memory around execs");
    await withDaemon([], "memory", (daemon) => measureExecMemory(daemon, size));
  }
  if (only.has("fanout")) {
    log("StreamLogs fan-out");
    await withDaemon(["--max-output-bytes", String(2 * size.fanoutBytes)], "fanout", (daemon) =>
      measureLogsFanout(daemon, size),
    );
  }
  if (only.has("scale")) {
    log("process scale and memory");
    await withDaemon(["--max-processes", String(size.scaleProcesses + 24)], "scale", (daemon) =>
      measureProcessScale(daemon, size),
    );
  }
  if (only.has("floods")) {
    log("an honest Exec during floods without the token");
    await withDaemon(["--token", floodToken], "floods", (daemon) => measureFloods(daemon, size));
  }
  if (only.has("files")) {
    log("the file service: transfers, a small file, a large listing");
    await withDaemon([], "files", (daemon) => measureFiles(daemon, size));
  }

  const results: BenchResults = {
    startedAt: startedAt.toISOString(),
    mode: size.mode,
    elapsedSeconds: (performance.now() - begun) / 1000,
    machine: { cpus: cpus().length, node: process.version, platform: process.platform, loadAverage: loadavg() },
    rows,
  };
  writeResults(out, results);
  process.stdout.write(`${formatTable(rows)}\n\n`);
  if (values.markdown) process.stdout.write(`${formatMarkdown(rows)}\n\n`);
  process.stdout.write(
    `${size.mode} run in ${results.elapsedSeconds.toFixed(0)} s on ${results.machine.cpus} cores; results in ${path.relative(process.cwd(), out)}\n`,
  );
}

/** What each daemon's figures are, for its peak RSS row. */
const groupFigures: Record<string, string> = {
  calls: "exec latency, concurrency, 1 GiB streams, clients",
  memory: `execs for the memory figure`,
  fanout: "StreamLogs fan-out (retains the whole output by design)",
  scale: "1,000 live processes",
  floods: "floods",
  files: "file transfers",
};

/**
 * A daemon's peak RSS over its figures beside its idle RSS. The daemon of the call figures has the
 * goal (idle + 40 MB); the others hold what their figures ask them to (1,000 processes, a retained
 * 64 MiB output), so their rows are information.
 */
function peakRow(group: string, idle: number, peak: number): Row {
  const goal = group === "calls";
  return {
    id: `daemon-peak-rss-${group}`,
    figure: `daemon peak RSS: ${groupFigures[group] ?? group}`,
    unit: "MB",
    value: peak,
    baseline: idle,
    ratio: peak - idle,
    goal: goal ? "<= 40 MB beyond" : "- beyond",
    verdict: goal ? (peak - idle <= 40 ? "pass" : "fail") : "info",
    note: `sampled every 50 ms; idle ${idle.toFixed(1)} MB 1 s after the daemon served`,
  };
}

main().then(
  // Client sessions and timers of the figures must not keep the process alive.
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`bench: ${(error as Error).stack ?? error}\n`);
    process.exit(1);
  },
);
