import { readdirSync, readFileSync } from "node:fs";
import { ProcessStatus } from "../../gen/sandbox/v1/sandbox_pb.js";
import { spawnBackground } from "../baseline.js";
import type { Daemon } from "../daemon.js";
import { ratioRow, type Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { percentile, runConcurrently, timeMs, waitFor } from "../stats.js";

/** The `sleep` argument that marks the bench's processes in /proc. */
const sleepMark = "86413";
/** Calls or spawns in flight while starting. */
const startConcurrency = 16;
/** Times the list step is run; the median is reported. */
const listRuns = 5;

/**
 * Starts `scaleProcesses` background `sleep` processes through StartProcess, lists them with
 * ListProcesses and kills them all with KillAllProcesses (SIGKILL, until none is running), beside
 * child_process spawning the same number, reading their /proc/<pid>/stat and killing them. Also
 * reports the daemon's idle RSS (a fresh daemon, before anything ran) and its RSS per live idle
 * process, and fails the kill row if any `sleep` is left in /proc afterwards.
 */
export async function measureProcessScale(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const count = size.scaleProcesses;
  await new Promise((resolve) => setTimeout(resolve, 500));
  const idleRss = daemon.rssBytes();

  // Baseline first, so the daemon's processes are not around while it runs.
  const children: Awaited<ReturnType<typeof spawnBackground>>[] = [];
  const baselineStartMs = await runConcurrently(count, startConcurrency, async () =>
    children.push(await spawnBackground("sleep", [sleepMark])),
  );
  const baselineListMs = await medianMs(listRuns, async () => {
    for (const child of children) readFileSync(`/proc/${child.pid}/stat`, "utf8");
  });
  const baselineKillMs = await timeMs(async () => {
    const exits = children.map((child) => new Promise((resolve) => child.once("exit", resolve)));
    for (const child of children) child.kill("SIGKILL");
    await Promise.all(exits);
  });

  const startMs = await runConcurrently(count, startConcurrency, async () => {
    const response = await daemon.client.startProcess({ spec: { command: "sleep", args: [sleepMark] } });
    if (response.process?.status !== ProcessStatus.RUNNING)
      throw new Error(`sleep did not start: ${response.process?.exit?.error}`);
  });
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const busyRss = daemon.rssBytes();
  let listed = 0;
  const listMs = await medianMs(listRuns, async () => {
    listed = (await daemon.client.listProcesses({ statuses: [ProcessStatus.RUNNING] })).processes.length;
  });
  let killed = 0;
  const killMs = await timeMs(async () => {
    killed = (await daemon.client.killAllProcesses({ signal: "SIGKILL" })).killedCount;
    // "Is any still running?" in one record (page_size 1): listing all 1,000 every 20 ms would load the
    // daemon's thread with the measuring itself while it handles the exits.
    await waitFor(
      async () =>
        (await daemon.client.listProcesses({ statuses: [ProcessStatus.RUNNING], pageSize: 1 })).processes.length === 0,
      60_000,
      20,
    );
  });
  const gone = await waitFor(() => markedProcesses() === 0, 5000);
  const left = markedProcesses();
  await daemon.client.cleanupProcesses({});

  const perProcessKb = (busyRss - idleRss) / count / 1024;
  return [
    ratioRow(
      {
        id: "scale-start",
        figure: `start ${count} background sleeps`,
        unit: "ms",
        value: startMs,
        baseline: baselineStartMs,
        note: `${startConcurrency} in flight`,
      },
      "max",
      2,
    ),
    ratioRow(
      {
        id: "scale-list",
        figure: `list ${count} processes`,
        unit: "ms",
        value: listMs,
        baseline: baselineListMs,
        note: `${listed} listed running, median of ${listRuns}; baseline reads each /proc/<pid>/stat`,
      },
      "max",
      2,
      listed === count,
    ),
    ratioRow(
      {
        id: "scale-kill",
        figure: `kill all ${count}, none left`,
        unit: "ms",
        value: killMs,
        baseline: baselineKillMs,
        note: `${killed} signalled; ${gone ? "no sleep left in /proc" : `${left} sleep processes LEFT in /proc`}`,
      },
      "max",
      2,
      gone && killed === count,
    ),
    {
      id: "memory-idle",
      figure: "daemon RSS idle",
      unit: "MB",
      value: idleRss / 1e6,
      baseline: null,
      ratio: null,
      goal: "< 80 MB",
      verdict: idleRss / 1e6 < 80 ? "pass" : "fail",
    },
    {
      id: "memory-per-process",
      figure: "daemon RSS per live idle process",
      unit: "KB",
      value: perProcessKb,
      baseline: null,
      ratio: null,
      goal: "< 200 KB",
      verdict: perProcessKb < 200 ? "pass" : "fail",
      note: `RSS ${(busyRss / 1e6).toFixed(1)} MB with ${count} live sleeps, ${(idleRss / 1e6).toFixed(1)} MB idle`,
    },
  ];
}

/** Median milliseconds of `runs` runs of `operation`. */
async function medianMs(runs: number, operation: () => Promise<unknown>): Promise<number> {
  const samples: number[] = [];
  for (let run = 0; run < runs; run++) samples.push(await timeMs(operation));
  return percentile(samples, 0.5);
}

/** Live processes whose command line is `sleep <sleepMark>`. */
function markedProcesses(): number {
  let found = 0;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "latin1") === `sleep\0${sleepMark}\0`) found++;
    } catch {
      // Exited meanwhile.
    }
  }
  return found;
}
