import { spawn } from "node:child_process";
import { spawnAndRead } from "../baseline.js";
import type { Daemon } from "../daemon.js";
import { ratioRow, type Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { percentile, runConcurrently, timeMs } from "../stats.js";
import { execTrue } from "../exec-true.js";
import { startFloor, type FloorServer } from "./connect-floor.js";

/** The floor server's Exec that runs `true` with Node's child_process (bench/floor-server.ts `spawn`). */
const spawnTrueOnFloor = { command: "spawn", args: ["true"] };

/**
 * exec("true") round trips over loopback gRPC and Connect/HTTP1.1, one at a time (p50, p99) and with `concurrency`
 * callers on one connection (execs/s), beside `child_process.spawn("true")` done the same way in
 * the bench process. Baseline and sandboxd runs alternate in rounds so a burst of load from
 * elsewhere on the machine hits both. The daemon's CPU per exec, one at a time and with `concurrency`
 * in flight, is measured beside the floor server's CPU per call (connect-es alone, see
 * connect-floor.ts) in the same rounds, on the same `node` as the daemon: the difference is what sandboxd
 * itself costs per exec. For scale, the floor server also runs `true` per call with Node's own
 * child_process in the same rounds: what a Node server that runs commands costs at the least.
 */
export async function measureExecLatency(daemon: Daemon, size: BenchSize, node?: string): Promise<Row[]> {
  const floor = await startFloor(node);
  try {
    return await measureWithFloor(daemon, size, floor);
  } finally {
    floor.stop();
  }
}

async function measureWithFloor(daemon: Daemon, size: BenchSize, floor: FloorServer): Promise<Row[]> {
  const warmUp = Math.min(20, size.sequentialCalls);
  for (let index = 0; index < warmUp; index++) {
    await execTrue(daemon.client);
    await execTrue(floor.client);
    await execTrue(floor.client, spawnTrueOnFloor);
    await spawnAndRead("true");
  }
  for (let index = 0; index < warmUp; index++) await execTrue(daemon.http1Client);
  const sandboxd: number[] = [];
  const http1: number[] = [];
  const firstByte: number[] = [];
  const baselineFirstByte: number[] = [];
  let cpuMs = 0;
  let floorCpuMs = 0;
  let floorSpawnCpuMs = 0;
  const floorSpawn: number[] = [];
  const baseline: number[] = [];
  const rounds = 5;
  const perRound = Math.ceil(size.sequentialCalls / rounds);
  for (let round = 0; round < rounds; round++) {
    const cpuBefore = daemon.cpuMs();
    for (let index = 0; index < perRound; index++) sandboxd.push(await timeMs(() => execTrue(daemon.client)));
    cpuMs += daemon.cpuMs() - cpuBefore;
    const floorCpuBefore = floor.cpuMs();
    for (let index = 0; index < perRound; index++) await execTrue(floor.client);
    floorCpuMs += floor.cpuMs() - floorCpuBefore;
    const floorSpawnCpuBefore = floor.cpuMs();
    for (let index = 0; index < perRound; index++)
      floorSpawn.push(await timeMs(() => execTrue(floor.client, spawnTrueOnFloor)));
    floorSpawnCpuMs += floor.cpuMs() - floorSpawnCpuBefore;
    for (let index = 0; index < perRound; index++) firstByte.push(await firstOutputMs(daemon));
    for (let index = 0; index < perRound; index++) baselineFirstByte.push(await baselineFirstOutputMs());
    for (let index = 0; index < perRound; index++) http1.push(await timeMs(() => execTrue(daemon.http1Client)));
    for (let index = 0; index < perRound; index++) baseline.push(await timeMs(() => spawnAndRead("true")));
  }
  let sandboxdMs = 0;
  let baselineMs = 0;
  let concurrentCpuMs = 0;
  let floorConcurrentCpuMs = 0;
  let floorSpawnConcurrentCpuMs = 0;
  let floorSpawnMs = 0;
  const concurrentRounds = 2;
  const perConcurrentRound = Math.ceil(size.concurrentCalls / concurrentRounds);
  for (let round = 0; round < concurrentRounds; round++) {
    const cpuBefore = daemon.cpuMs();
    sandboxdMs += await runConcurrently(perConcurrentRound, size.concurrency, () => execTrue(daemon.client));
    concurrentCpuMs += daemon.cpuMs() - cpuBefore;
    const floorCpuBefore = floor.cpuMs();
    await runConcurrently(perConcurrentRound, size.concurrency, () => execTrue(floor.client));
    floorConcurrentCpuMs += floor.cpuMs() - floorCpuBefore;
    const floorSpawnCpuBefore = floor.cpuMs();
    floorSpawnMs += await runConcurrently(perConcurrentRound, size.concurrency, () =>
      execTrue(floor.client, spawnTrueOnFloor),
    );
    floorSpawnConcurrentCpuMs += floor.cpuMs() - floorSpawnCpuBefore;
    baselineMs += await runConcurrently(perConcurrentRound, size.concurrency, () => spawnAndRead("true"));
  }
  // The first call after a pause, as an agent makes them: each after 0.5 s without calls, alternating;
  // measured last, so the pauses touch none of the figures above.
  const afterIdle: number[] = [];
  const baselineAfterIdle: number[] = [];
  for (let index = 0; index < size.idleCalls; index++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    afterIdle.push(await timeMs(() => execTrue(daemon.client)));
    await new Promise((resolve) => setTimeout(resolve, 500));
    baselineAfterIdle.push(await timeMs(() => spawnAndRead("true")));
  }
  const total = perConcurrentRound * concurrentRounds;
  const count = `${sandboxd.length} calls each`;
  const sequentialCpu = cpuMs / sandboxd.length;
  const floorSequentialCpu = floorCpuMs / sandboxd.length;
  const concurrentCpu = concurrentCpuMs / total;
  const floorConcurrentCpu = floorConcurrentCpuMs / total;
  const floorSpawnCpu = floorSpawnCpuMs / sandboxd.length;
  const floorSpawnConcurrentCpu = floorSpawnConcurrentCpuMs / total;
  return [
    ratioRow(
      {
        id: "exec-latency-p50",
        figure: 'exec("true") sequential p50',
        unit: "ms",
        value: percentile(sandboxd, 0.5),
        baseline: percentile(baseline, 0.5),
        note: count,
      },
      "max",
      1.4,
    ),
    {
      id: "exec-latency-spawning-floor-p50",
      figure: 'connect-es + child_process.spawn: Exec("true") p50',
      unit: "ms",
      value: percentile(floorSpawn, 0.5),
      baseline: percentile(baseline, 0.5),
      ratio: percentile(floorSpawn, 0.5) / percentile(baseline, 0.5),
      goal: "-",
      verdict: "info",
      note: "the floor server's Exec running `sh -c true` with Node's child_process, same rounds, same client",
    },
    ratioRow(
      {
        id: "exec-latency-http1-p50",
        figure: 'exec("true") sequential p50, Connect/HTTP1.1',
        unit: "ms",
        value: percentile(http1, 0.5),
        baseline: percentile(baseline, 0.5),
        note: count,
      },
      "max",
      1.4,
    ),
    beyondRow({
      id: "exec-cpu",
      figure: "daemon CPU per sequential exec (baseline: connect-es alone)",
      value: sequentialCpu,
      baseline: floorSequentialCpu,
      limit: 0.6,
      note: "user + system time (/proc/<pid>/stat) of the daemon over the sequential gRPC calls, of the floor server over as many calls in the same rounds",
    }),
    beyondRow({
      id: "exec-cpu-concurrent",
      figure: `daemon CPU per exec, ${size.concurrency} concurrent (baseline: connect-es alone)`,
      value: concurrentCpu,
      baseline: floorConcurrentCpu,
      limit: 0.4,
      note: `user + system time over ${total} calls each, ${size.concurrency} in flight, rounds alternating with the floor server's`,
    }),
    infoBeyondRow({
      id: "exec-cpu-spawning-floor",
      figure: "daemon CPU per sequential exec (baseline: connect-es + child_process.spawn)",
      value: sequentialCpu,
      baseline: floorSpawnCpu,
      note: "the floor server's Exec running `sh -c true` with Node's child_process (own process group, pipes), same rounds",
    }),
    infoBeyondRow({
      id: "exec-cpu-concurrent-spawning-floor",
      figure: `daemon CPU per exec, ${size.concurrency} concurrent (baseline: connect-es + child_process.spawn)`,
      value: concurrentCpu,
      baseline: floorSpawnConcurrentCpu,
      note: `${total} calls each, ${size.concurrency} in flight, same rounds`,
    }),
    ratioRow(
      {
        id: "exec-first-byte-p50",
        figure: 'first stdout byte of "echo hi" p50',
        unit: "ms",
        value: percentile(firstByte, 0.5),
        baseline: percentile(baselineFirstByte, 0.5),
        note: count,
      },
      "max",
      1.3,
    ),
    ratioRow(
      {
        id: "exec-latency-p99",
        figure: 'exec("true") sequential p99',
        unit: "ms",
        value: percentile(sandboxd, 0.99),
        baseline: percentile(baseline, 0.99),
        note: count,
      },
      "max",
      2,
    ),
    {
      id: "exec-after-idle-p50",
      figure: 'exec("true") after 0.5 s idle, p50',
      unit: "ms",
      value: percentile(afterIdle, 0.5),
      baseline: percentile(baselineAfterIdle, 0.5),
      ratio: percentile(afterIdle, 0.5) / percentile(baselineAfterIdle, 0.5),
      goal: "-",
      verdict: "info",
      note: `${afterIdle.length} calls each, each the first after half a second without calls`,
    },
    ratioRow(
      {
        id: "exec-concurrent",
        figure: `exec("true") ${size.concurrency} concurrent`,
        unit: "execs/s",
        value: total / (sandboxdMs / 1000),
        baseline: total / (baselineMs / 1000),
        note: `${total} calls each, ${size.concurrency} in flight, one connection`,
      },
      "min",
      1.2,
    ),
    {
      id: "exec-concurrent-spawning-floor",
      figure: `connect-es + child_process.spawn: Exec("true") ${size.concurrency} concurrent`,
      unit: "execs/s",
      value: total / (floorSpawnMs / 1000),
      baseline: total / (baselineMs / 1000),
      ratio: baselineMs / floorSpawnMs,
      goal: "-",
      verdict: "info",
      note: `${total} calls each, ${size.concurrency} in flight, same rounds`,
    },
  ];
}

/** Milliseconds from an Exec of `echo hi` to its first output event. */
async function firstOutputMs(daemon: Daemon): Promise<number> {
  const started = performance.now();
  let first = 0;
  for await (const event of daemon.client.exec({ spec: { command: "echo hi" } })) {
    if (event.event.case === "output" && first === 0) first = performance.now() - started;
  }
  return first;
}

/** Milliseconds from `child_process.spawn("/bin/sh", ["-c", "echo hi"])` to its first stdout byte. */
function baselineFirstOutputMs(): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn("/bin/sh", ["-c", "echo hi"], { stdio: ["ignore", "pipe", "ignore"] });
    let first = 0;
    child.stdout.once("data", () => (first = performance.now() - started));
    child.stdout.resume();
    child.once("error", reject);
    child.once("close", () => resolve(first));
  });
}

/** An information row of a figure beside its baseline: the ratio column holds the difference. */
function infoBeyondRow(fields: { id: string; figure: string; value: number; baseline: number; note: string }): Row {
  return {
    ...fields,
    unit: "ms",
    ratio: fields.value - fields.baseline,
    goal: "- beyond",
    verdict: "info",
  };
}

/**
 * A row whose goal is at most `limit` ms beyond its baseline (the floor server's figure of the same
 * rounds): the ratio column holds the difference.
 */
function beyondRow(fields: {
  id: string;
  figure: string;
  value: number;
  baseline: number;
  limit: number;
  note: string;
}): Row {
  const beyond = fields.value - fields.baseline;
  return {
    id: fields.id,
    figure: fields.figure,
    unit: "ms",
    value: fields.value,
    baseline: fields.baseline,
    ratio: beyond,
    goal: `<= ${fields.limit} ms beyond`,
    verdict: beyond <= fields.limit ? "pass" : "fail",
    note: fields.note,
  };
}
