import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { repoRoot, type Daemon } from "../daemon.js";
import type { Row } from "../report.js";
import type { BenchSize } from "../size.js";

/** The ghz version bench/install-ghz.sh installs; pinned so numbers compare across runs. */
export const ghzVersion = "v0.120.0";
/** Where the bench looks for ghz first (`GOBIN` of the install, ignored by git). */
export const ghzPath = path.join(repoRoot, "bench/.tools/bin/ghz");

/** ghz's JSON report, the fields used. */
interface GhzReport {
  count: number;
  rps: number;
  latencyDistribution: { percentage: number; latency: number }[] | null;
  statusCodeDistribution: Record<string, number> | null;
  errorDistribution: Record<string, number> | null;
}

/**
 * ghz against Exec of `true` at `ghzConcurrency` concurrent calls over one connection: RPS, p50,
 * p99 and errors (the goal is zero). Skipped, with a note saying so, when ghz is not installed.
 */
export async function measureGhz(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const binary = findGhz();
  const skipped = (note: string): Row[] => [
    {
      id: "ghz",
      figure: `ghz Exec true, ${size.ghzConcurrency} concurrent`,
      unit: "rps",
      value: null,
      baseline: null,
      ratio: null,
      goal: "0 errors",
      verdict: "skipped",
      note,
    },
  ];
  if (binary === undefined) {
    return skipped(
      `ghz not found: install it with bash bench/install-ghz.sh (go install github.com/bojand/ghz/cmd/ghz@${ghzVersion})`,
    );
  }
  const output = await run(binary, [
    "--insecure",
    "--proto",
    path.join(repoRoot, "proto/sandbox/v1/sandbox.proto"),
    "--import-paths",
    path.join(repoRoot, "proto"),
    "--call",
    "sandbox.v1.SandboxService.Exec",
    "--data",
    JSON.stringify({ spec: { command: "true" } }),
    "--concurrency",
    String(size.ghzConcurrency),
    "--total",
    String(size.ghzCalls),
    "--format",
    "json",
    daemon.url.replace(/^http:\/\//, ""),
  ]);
  let report: GhzReport;
  try {
    report = JSON.parse(output.stdout) as GhzReport;
  } catch {
    return skipped(`ghz failed (exit ${output.code}): ${output.stderr.slice(0, 300)}`);
  }
  const latency = (percentage: number) =>
    (report.latencyDistribution?.find((entry) => entry.percentage === percentage)?.latency ?? Number.NaN) / 1e6;
  const ok = report.statusCodeDistribution?.OK ?? 0;
  const errors = report.count - ok;
  const errorKinds = Object.entries(report.errorDistribution ?? {})
    .map(([message, count]) => `${count}x ${message}`)
    .join("; ");
  const rows: Row[] = [
    {
      id: "ghz",
      figure: `ghz Exec true, ${size.ghzConcurrency} concurrent`,
      unit: "rps",
      value: report.rps,
      baseline: null,
      ratio: null,
      goal: "0 errors",
      verdict: errors === 0 && report.count === size.ghzCalls ? "pass" : "fail",
      note: `${report.count} calls, ${errors} errors${errorKinds ? `: ${errorKinds.slice(0, 300)}` : ""}; ghz ${ghzVersion}`,
    },
    {
      id: "ghz-p50",
      figure: "ghz p50",
      unit: "ms",
      value: latency(50),
      baseline: null,
      ratio: null,
      goal: "-",
      verdict: "info",
    },
    {
      id: "ghz-p99",
      figure: "ghz p99",
      unit: "ms",
      value: latency(99),
      baseline: null,
      ratio: null,
      goal: "-",
      verdict: "info",
    },
  ];
  return rows;
}

function findGhz(): string | undefined {
  if (existsSync(ghzPath)) return ghzPath;
  for (const dir of (process.env.PATH ?? "").split(":")) {
    if (dir && existsSync(path.join(dir, "ghz"))) return path.join(dir, "ghz");
  }
  return undefined;
}

function run(file: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (data: string) => (stdout += data));
    child.stderr.setEncoding("utf8").on("data", (data: string) => (stderr += data));
    child.once("error", (error) => resolve({ code: null, stdout, stderr: error.message }));
    child.once("close", (code) => resolve({ code, stdout, stderr }));
  });
}
