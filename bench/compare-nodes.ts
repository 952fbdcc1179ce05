/**
 * The daemon (bench/.tools/bundle/sandboxd.mjs, from `npm run bench` or bench/build.ts) and the floor server on
 * several node binaries in one run, rounds alternating so load from elsewhere hits all of them: CPU per exec
 * beyond the floor (sequential and 16 in flight), p50 and 16-concurrent rate against raw spawns, RSS idle and peak.
 *
 *     npx tsx bench/compare-nodes.ts node20=/usr/bin/node node24=$(npx -y -p node@24 node -p process.execPath)
 *
 * ROUNDS (4), SEQ (100 sequential execs per round) and CONC (320 concurrent per round) size it.
 */
import { startDaemon, type Daemon } from "./daemon.js";
import { execTrue } from "./exec-true.js";
import { startFloor, type FloorServer } from "./figures/connect-floor.js";
import { runConcurrently, timeMs, percentile } from "./stats.js";
import { spawnAndRead } from "./baseline.js";
const entry = "bench/.tools/bundle/sandboxd.mjs";
const nodes = process.argv.slice(2).map((a) => {
  const [name, path] = a.split("=");
  return { name, path };
});
const rounds = Number(process.env.ROUNDS ?? 4),
  seq = Number(process.env.SEQ ?? 100),
  conc = Number(process.env.CONC ?? 320);
type S = {
  d: Daemon;
  f: FloorServer;
  name: string;
  idle: number;
  peak: number;
  seqCpu: number;
  fseqCpu: number;
  concCpu: number;
  fconcCpu: number;
  lat: number[];
  concMs: number;
};
const all: S[] = [];
for (const n of nodes) {
  const d = await startDaemon({ entry, node: n.path });
  const f = await startFloor(n.path);
  await new Promise((r) => setTimeout(r, 1500));
  all.push({
    d,
    f,
    name: n.name,
    idle: d.rssBytes() / 1e6,
    peak: 0,
    seqCpu: 0,
    fseqCpu: 0,
    concCpu: 0,
    fconcCpu: 0,
    lat: [],
    concMs: 0,
  });
}
for (const s of all)
  for (let i = 0; i < 100; i++) {
    await execTrue(s.d.client);
    await execTrue(s.f.client);
  }
const base: number[] = [];
let baseConcMs = 0;
for (let r = 0; r < rounds; r++) {
  for (const s of all) {
    let c = s.d.cpuMs();
    for (let i = 0; i < seq; i++) s.lat.push(await timeMs(() => execTrue(s.d.client)));
    s.seqCpu += s.d.cpuMs() - c;
    c = s.f.cpuMs();
    for (let i = 0; i < seq; i++) await execTrue(s.f.client);
    s.fseqCpu += s.f.cpuMs() - c;
    c = s.d.cpuMs();
    s.concMs += await runConcurrently(conc, 16, () => execTrue(s.d.client));
    s.concCpu += s.d.cpuMs() - c;
    s.peak = Math.max(s.peak, s.d.rssBytes() / 1e6);
    c = s.f.cpuMs();
    await runConcurrently(conc, 16, () => execTrue(s.f.client));
    s.fconcCpu += s.f.cpuMs() - c;
    for (let i = 0; i < seq / 2; i++) base.push(await timeMs(() => spawnAndRead("true")));
    baseConcMs += await runConcurrently(conc / 2, 16, () => spawnAndRead("true"));
  }
}
const n = rounds * seq,
  m = rounds * conc,
  bp50 = percentile(base, 0.5),
  brate = (all.length * rounds * conc) / 2 / (baseConcMs / 1000);
for (const s of all) {
  console.log(
    `${s.name}: seq cpu ${(s.seqCpu / n).toFixed(2)} (floor ${(s.fseqCpu / n).toFixed(2)}, beyond ${((s.seqCpu - s.fseqCpu) / n).toFixed(2)}) ms; 16-conc cpu ${(s.concCpu / m).toFixed(2)} (floor ${(s.fconcCpu / m).toFixed(2)}, beyond ${((s.concCpu - s.fconcCpu) / m).toFixed(2)}) ms; p50 ${(percentile(s.lat, 0.5) / bp50).toFixed(2)}x p99 ${percentile(s.lat, 0.99).toFixed(1)} ms; 16-conc ${(m / (s.concMs / 1000) / brate).toFixed(2)}x; rss idle ${s.idle.toFixed(1)} peak ${s.peak.toFixed(1)} MB`,
  );
}
for (const s of all) {
  s.f.stop();
  await s.d.stop();
}
process.exit(0);
