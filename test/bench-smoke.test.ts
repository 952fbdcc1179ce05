import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { BenchResults } from "../bench/report.js";

/** Every row `npm run bench` reports, in order; ghz's rows are one "skipped" row when ghz is absent. */
const expectedIds = [
  "daemon-start",
  "daemon-start-relaunch",
  "daemon-start-tsx",
  "exec-latency-p50",
  "exec-latency-spawning-floor-p50",
  "exec-latency-http1-p50",
  "exec-cpu",
  "exec-cpu-concurrent",
  "exec-cpu-spawning-floor",
  "exec-cpu-concurrent-spawning-floor",
  "exec-first-byte-p50",
  "exec-latency-p99",
  "exec-after-idle-p50",
  "exec-concurrent",
  "exec-concurrent-spawning-floor",
  "process-v1-execute-p50",
  "exec-throughput",
  "exec-throughput-http1",
  "exec-cpu-per-mb",
  "exec-message-bytes",
  "client-rss-stream-ts",
  "client-rss-stream-python",
  "client-rss-exec-ts",
  "client-rss-exec-python",
  "h2-frames-ts",
  "h2-frames-python",
  "ghz",
  "daemon-peak-rss-calls",
  "floor-call-p50",
  "floor-call-p99",
  "floor-cpu-per-call",
  "floor-cpu-per-call-concurrent",
  "floor-concurrent",
  "floor-throughput",
  "floor-cpu-per-mb",
  "floor-cpu-per-mb-daemon-size",
  "floor-rss-idle",
  "floor-rss-after-calls",
  "exec-cpu-per-mb-vs-floor",
  "rss-idle",
  "rss-after-execs",
  "daemon-peak-rss-memory",
  "logs-fanout",
  "daemon-peak-rss-fanout",
  "scale-start",
  "scale-list",
  "scale-kill",
  "memory-idle",
  "memory-per-process",
  "daemon-peak-rss-scale",
  "exec-p99-unauthenticated-flood",
  "exec-p99-watch-flood",
  "daemon-peak-rss-floods",
  "files-floor-put-http2",
  "files-floor-get-http2",
  "files-floor-put-http1",
  "files-floor-get-http1",
  "files-upload-grpc",
  "files-upload-http1",
  "files-upload-rest",
  "files-download-grpc",
  "files-download-http1",
  "files-download-rest",
  "files-rss-growth",
  "files-small-p50",
  "files-list-10k",
  "daemon-peak-rss-files",
];

const directory = mkdtempSync(path.join(tmpdir(), "sandboxd-bench-smoke-"));
afterAll(() => rmSync(directory, { recursive: true, force: true }));

// A benchmark is not a test: nothing here judges a timing. This only proves the harness runs end to
// end and writes a well-formed results.json, so the documented command keeps working.
describe("bench harness (--quick)", () => {
  it("runs every figure and writes a results.json with a well-formed row for each", () => {
    const out = path.join(directory, "results.json");
    const run = spawnSync(process.execPath, ["--import", "tsx", "bench/run.ts", "--quick", "--out", out], {
      cwd: path.resolve(import.meta.dirname, ".."),
      encoding: "utf8",
      // Minutes on a busy machine: each figure runs a few rounds against real daemons.
      timeout: 540_000,
    });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^figure\s+sandboxd\s+baseline\s+ratio\s+goal\s+result/m);

    const results = JSON.parse(readFileSync(out, "utf8")) as BenchResults;
    expect(results.mode).toBe("quick");
    const ids = results.rows.map((row) => row.id).filter((id) => !id.startsWith("ghz-"));
    expect(ids).toEqual(expectedIds);
    for (const row of results.rows) {
      expect(["pass", "fail", "info", "skipped"]).toContain(row.verdict);
      expect(row.figure.length).toBeGreaterThan(0);
      if (row.verdict === "skipped") {
        expect(row.note).toBeTruthy();
      } else {
        expect(Number.isFinite(row.value), `${row.id} has a value`).toBe(true);
        if (row.baseline !== null) expect(row.baseline, `${row.id} baseline`).toBeGreaterThan(0);
      }
    }
    // Correctness checks ride along with the timings: every byte arrived, nothing was left running.
    const byId = new Map(results.rows.map((row) => [row.id, row]));
    expect(byId.get("exec-throughput")!.note).not.toMatch(/short read/);
    expect(byId.get("logs-fanout")!.note).toMatch(/every live reader got every byte/);
    expect(byId.get("scale-kill")!.note).toMatch(/no sleep left/);
  }, 600_000);
});
