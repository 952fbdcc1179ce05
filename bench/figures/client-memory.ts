import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { buildClientStream } from "../build.js";
import { repoRoot, type Daemon } from "../daemon.js";
import { startH2DataCounter } from "../h2-data-counter.js";
import type { Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { formatBytes } from "./exec-throughput.js";

/** What a client process (bench/client-stream.ts or bench/client_stream.py) printed. */
interface ClientRun {
  bytes: number;
  /** Output events, one per message (streaming APIs only). */
  events: number;
  baseRss: number;
  peakRss: number;
  ms: number;
}

/** A client process that failed: the last line of what it said. */
interface Failure {
  error: string;
}

/** Resolves with the run, or with its failure (a client that cannot stream the figure fails its row, not the bench). */
function attempt(run: Promise<ClientRun>): Promise<ClientRun | Failure> {
  return run.catch((error: Error) => ({
    error: (error.message.match(/(RangeError|Error|error)[^\n]*/)?.[0] ?? error.message).slice(0, 200),
  }));
}

/** The Python of python/.venv (test/side/python.sh makes it), or `$PYTHON`; undefined when neither has grpcio. */
function findPython(): string | undefined {
  const candidates = [process.env.PYTHON, path.join(repoRoot, "python/.venv/bin/python")].filter(
    (candidate): candidate is string => candidate !== undefined && existsSync(candidate),
  );
  return candidates[0];
}

/** Runs one client process to its end and parses its JSON line; rejects with its stderr when it fails. */
function runClient(command: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<ClientRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (data: string) => (stdout += data));
    child.stderr.setEncoding("utf8").on("data", (data: string) => (stderr += data));
    child.once("error", reject);
    child.once("close", (code) => {
      const line = stdout.trim().split("\n").at(-1) ?? "";
      if (code === 0 && line.startsWith("{")) resolve(JSON.parse(line) as ClientRun);
      else reject(new Error(`${path.basename(args[0] ?? command)} exited with ${code}: ${stderr.slice(-2000)}`));
    });
  });
}

/**
 * Client memory and HTTP/2 framing, each client a process of its own so its RSS is its own: the
 * TypeScript SDK's `execStream()` and the Python SDK's `exec_stream()` stream `size.clientStreamBytes`
 * (the goal: RSS growth at most 64 MB, whatever the size); `exec()` of `size.clientExecBytes`, which
 * keeps the whole result by design, for information (growth as a multiple of the output: the copies
 * it holds); and, through a proxy that counts frames, how many HTTP/2 DATA frames carry a MiB of
 * output to each client (the frame size the client advertises decides it).
 */
export async function measureClientMemory(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const bundle = await buildClientStream();
  const python = findPython();
  const pythonEnv = { ...process.env, PYTHONPATH: path.join(repoRoot, "python/src") };
  const typescript = (url: string, api: string, bytes: number) =>
    attempt(runClient(process.execPath, [bundle, url, api, String(bytes)]));
  const py = (url: string, api: string, bytes: number) =>
    attempt(runClient(python!, [path.join(repoRoot, "bench/client_stream.py"), url, api, String(bytes)], pythonEnv));
  const rows: Row[] = [];
  const growthRow = (
    id: string,
    figure: string,
    run: ClientRun | Failure | string,
    expected: number,
    goal: boolean,
  ): Row => {
    if (typeof run === "string" || "error" in run)
      return {
        id,
        figure,
        unit: "MB",
        value: null,
        baseline: null,
        ratio: null,
        goal: goal ? "<= 64 MB" : "-",
        verdict: typeof run === "string" ? "skipped" : "fail",
        note: typeof run === "string" ? run : `the client failed: ${run.error}`,
      };
    const growth = (run.peakRss - run.baseRss) / 1e6;
    const complete = run.bytes === expected;
    return {
      id,
      figure,
      unit: "MB",
      value: growth,
      baseline: null,
      ratio: null,
      goal: goal ? "<= 64 MB" : "-",
      verdict: goal ? (growth <= 64 && complete ? "pass" : "fail") : "info",
      note:
        `RSS ${(run.baseRss / 1e6).toFixed(1)} MB before, peak ${(run.peakRss / 1e6).toFixed(1)} MB; ` +
        `${(growth / (expected / 1e6)).toFixed(2)}x the output; ${(megabytes(run.bytes) / (run.ms / 1000)).toFixed(0)} MB/s` +
        (complete ? "" : `; SHORT: ${run.bytes} of ${expected} bytes`),
    };
  };
  const noPython = "no Python with the SDK's dependencies (run bash test/side/python.sh once, or set PYTHON)";

  const streamBytes = size.clientStreamBytes;
  const execBytes = size.clientExecBytes;
  rows.push(
    growthRow(
      "client-rss-stream-ts",
      `client RSS growth, TypeScript execStream() of ${formatBytes(streamBytes)}`,
      await typescript(daemon.url, "execStream", streamBytes),
      streamBytes,
      true,
    ),
    growthRow(
      "client-rss-stream-python",
      `client RSS growth, Python exec_stream() of ${formatBytes(streamBytes)}`,
      python === undefined ? noPython : await py(daemon.url, "exec_stream", streamBytes),
      streamBytes,
      true,
    ),
    growthRow(
      "client-rss-exec-ts",
      `client RSS growth, TypeScript exec() of ${formatBytes(execBytes)}`,
      await typescript(daemon.url, "exec", execBytes),
      execBytes,
      false,
    ),
    growthRow(
      "client-rss-exec-python",
      `client RSS growth, Python exec() of ${formatBytes(execBytes)}`,
      python === undefined ? noPython : await py(daemon.url, "exec", execBytes),
      execBytes,
      false,
    ),
  );

  // Framing: the same stream through a counting proxy (which costs time, so it is not timed).
  const frameBytes = size.clientFrameBytes;
  const framesRow = async (
    id: string,
    language: string,
    run: (url: string) => Promise<ClientRun | Failure>,
  ): Promise<Row> => {
    const figure = `HTTP/2 DATA frames per MiB of output, ${language} client`;
    const proxy = await startH2DataCounter(new URL(daemon.url));
    try {
      const result = await run(proxy.url);
      if ("error" in result)
        return {
          id,
          figure,
          unit: "frames",
          value: null,
          baseline: null,
          ratio: null,
          goal: "-",
          verdict: "fail",
          note: `the client failed: ${result.error}`,
        };
      const mebibytes = result.bytes / (1024 * 1024);
      return {
        id,
        figure,
        unit: "frames",
        value: proxy.data.frames / mebibytes,
        baseline: null,
        ratio: null,
        goal: "-",
        verdict: "info",
        note:
          `${formatBytes(frameBytes)} via execStream: ${proxy.data.frames} DATA frames, ` +
          `${(result.events / mebibytes).toFixed(1)} output messages per MiB; ` +
          `the client advertised a max frame size of ${proxy.clientMaxFrameSize} bytes`,
      };
    } finally {
      await proxy.close();
    }
  };
  rows.push(await framesRow("h2-frames-ts", "TypeScript", (url) => typescript(url, "execStream", frameBytes)));
  rows.push(
    python === undefined
      ? {
          id: "h2-frames-python",
          figure: "HTTP/2 DATA frames per MiB of output, Python client",
          unit: "frames",
          value: null,
          baseline: null,
          ratio: null,
          goal: "-",
          verdict: "skipped",
          note: noPython,
        }
      : await framesRow("h2-frames-python", "Python", (url) => py(url, "exec_stream", frameBytes)),
  );
  return rows;
}

function megabytes(bytes: number): number {
  return bytes / 1e6;
}
