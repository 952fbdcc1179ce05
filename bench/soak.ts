/**
 * Soak: many execs and start-stream-kill cycles in a row against a real daemon process, with zero
 * failures allowed, and the daemon's open file descriptors, PTYs, child processes and RSS compared
 * before and after.
 *
 *     npx tsx bench/soak.ts [--execs 10000] [--cycles 1000] [--concurrency 8]
 *
 * CI runs the same code at a reduced count through test/soak.test.ts.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ProcessStatus, SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";

/** Options for {@link runSoak}. */
export interface SoakOptions {
  /** Exec calls to run, each checked for its exact output and exit code. */
  execs: number;
  /** StartProcess, StreamLogs, KillProcess cycles, each checked for a killed exit. */
  cycles: number;
  /** Calls in flight at once. Default 8. */
  concurrency?: number;
}

/** What the daemon held, read from /proc. */
export interface DaemonResources {
  /** Open file descriptors. */
  fds: number;
  /** Open PTY masters and slaves (/dev/ptmx, /dev/pts/N). */
  ptys: number;
  /** Live descendant processes. */
  children: number;
  /** Resident set size in bytes. */
  rssBytes: number;
}

/** The outcome of {@link runSoak}. */
export interface SoakReport {
  execs: number;
  cycles: number;
  failures: string[];
  before: DaemonResources;
  after: DaemonResources;
  seconds: number;
}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Starts a daemon process, runs the soak against it, stops it and reports. */
export async function runSoak(options: SoakOptions): Promise<SoakReport> {
  const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-soak-")));
  const daemon = spawn(
    process.execPath,
    ["--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--workspace", workspace, "--linger-ms", "1000"],
    {
      cwd: root,
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  try {
    const url = await daemonUrl(daemon);
    const sessionManager = new Http2SessionManager(url);
    const client = createClient(SandboxService, createGrpcTransport({ baseUrl: url, sessionManager }));
    const failures: string[] = [];
    const concurrency = options.concurrency ?? 8;
    // Warm up, so lazily loaded code and first-use allocations are in the baseline.
    await inParallel(40, concurrency, (i) => oneExec(client, i, failures));
    await inParallel(8, concurrency, (i) => oneCycle(client, i, failures));
    await client.cleanupProcesses({});
    const before = await settledResources(daemon.pid!);
    const started = Date.now();
    await inParallel(options.execs, concurrency, (i) => oneExec(client, i, failures));
    await inParallel(options.cycles, concurrency, (i) => oneCycle(client, i, failures));
    const seconds = (Date.now() - started) / 1000;
    await client.cleanupProcesses({});
    const after = await settledResources(daemon.pid!, before);
    sessionManager.abort();
    return { execs: options.execs, cycles: options.cycles, failures, before, after, seconds };
  } finally {
    daemon.kill("SIGTERM");
    await new Promise((resolve) => (daemon.exitCode !== null ? resolve(undefined) : daemon.once("exit", resolve)));
    rmSync(workspace, { recursive: true, force: true });
  }
}

async function oneExec(client: Client<typeof SandboxService>, i: number, failures: string[]): Promise<void> {
  const pty = i % 10 === 9;
  try {
    let stdout = "";
    let exit: number | undefined;
    for await (const response of client.exec({ spec: { command: `echo soak-${i}`, ...(pty ? { pty: {} } : {}) } })) {
      if (response.event.case === "output") stdout += Buffer.from(response.event.value.data).toString();
      if (response.event.case === "exited") exit = response.event.value.exitCode;
    }
    if (stdout.replaceAll("\r", "") !== `soak-${i}\n` || exit !== 0)
      failures.push(`exec ${i}: ${JSON.stringify(stdout)} exit ${exit}`);
  } catch (error) {
    failures.push(`exec ${i}: ${String(error)}`);
  }
}

async function oneCycle(client: Client<typeof SandboxService>, i: number, failures: string[]): Promise<void> {
  try {
    const { process } = await client.startProcess({
      spec: { command: `while :; do echo tick-${i}; sleep 0.05; done`, pty: i % 4 === 3 ? {} : undefined },
    });
    const processId = process!.processId;
    let sawOutput = false;
    let exited: ProcessStatus | undefined;
    for await (const response of client.streamLogs({ processId, follow: true })) {
      if (response.event.case === "output" && !sawOutput) {
        sawOutput = true;
        await client.killProcess({ processId, signal: "SIGKILL" });
      }
      if (response.event.case === "exited") exited = response.event.value.status;
    }
    if (!sawOutput || exited !== ProcessStatus.KILLED)
      failures.push(`cycle ${i}: output ${sawOutput}, exit status ${exited}`);
  } catch (error) {
    failures.push(`cycle ${i}: ${String(error)}`);
  }
}

async function inParallel(count: number, concurrency: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      while (next < count) await task(next++);
    }),
  );
}

function daemonUrl(daemon: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let stderr = "";
    daemon.stderr!.on("data", (data: Buffer) => {
      stderr += data.toString();
      const match = /listening on (\S+)/.exec(stderr);
      if (match) resolve(match[1]);
    });
    daemon.once("exit", (code) => reject(new Error(`daemon exited with ${code}: ${stderr}`)));
  });
}

/** Reads the daemon's resources from /proc. */
export function daemonResources(pid: number): DaemonResources {
  const fdDir = `/proc/${pid}/fd`;
  let ptys = 0;
  const fds = readdirSync(fdDir);
  for (const fd of fds) {
    try {
      const target = readlinkSync(`${fdDir}/${fd}`);
      if (target === "/dev/ptmx" || target.startsWith("/dev/pts/")) ptys++;
    } catch {
      // Closed meanwhile.
    }
  }
  const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return { fds: fds.length, ptys, children: descendants(pid), rssBytes: Number(rss) * 1024 };
}

function descendants(pid: number): number {
  const parents = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (fields[0] !== "Z") parents.set(Number(entry), Number(fields[1]));
    } catch {
      // Gone meanwhile.
    }
  }
  let count = 0;
  for (const [child] of parents) {
    for (let at = parents.get(child); at !== undefined && at > 1; at = parents.get(at)) {
      if (at === pid) {
        count++;
        break;
      }
    }
  }
  return count;
}

/** Waits (up to 15 s) until fds, PTYs and children are at or below `baseline`, then reads them. */
async function settledResources(pid: number, baseline?: DaemonResources): Promise<DaemonResources> {
  const deadline = Date.now() + 15_000;
  let last = daemonResources(pid);
  while (Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const now = daemonResources(pid);
    const settled = baseline
      ? now.fds <= baseline.fds && now.ptys <= baseline.ptys && now.children <= baseline.children
      : now.fds === last.fds && now.children === 0 && now.ptys === 0;
    last = now;
    if (settled) break;
  }
  return last;
}

/** Formats a report as the table docs/RELIABILITY.md quotes. */
export function formatReport(report: SoakReport): string {
  const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
  return [
    `soak: ${report.execs} execs and ${report.cycles} start-stream-kill cycles in ${report.seconds.toFixed(1)} s, ${report.failures.length} failures`,
    `| resource | before | after |`,
    `| --- | --- | --- |`,
    `| open fds | ${report.before.fds} | ${report.after.fds} |`,
    `| PTYs | ${report.before.ptys} | ${report.after.ptys} |`,
    `| child processes | ${report.before.children} | ${report.after.children} |`,
    `| RSS | ${mib(report.before.rssBytes)} | ${mib(report.after.rssBytes)} |`,
  ].join("\n");
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === realpathSync(process.argv[1])) {
  const { values } = parseArgs({
    options: { execs: { type: "string" }, cycles: { type: "string" }, concurrency: { type: "string" } },
  });
  const report = await runSoak({
    execs: Number(values.execs ?? 10_000),
    cycles: Number(values.cycles ?? 1000),
    concurrency: Number(values.concurrency ?? 8),
  });
  console.log(formatReport(report));
  for (const failure of report.failures.slice(0, 20)) console.log(`failure: ${failure}`);
  process.exit(
    report.failures.length === 0 &&
      report.after.fds <= report.before.fds &&
      report.after.children <= report.before.children
      ? 0
      : 1,
  );
}
