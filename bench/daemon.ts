import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import http2 from "node:http2";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { createSandboxConnection, type SandboxConnection } from "../src/client/core/transport.js";

/** Root of the repository. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Options for {@link startDaemon}. */
export interface DaemonOptions {
  /**
   * The daemon's entry point: a bundled `sandboxd.mjs` (see `buildDaemon`), or undefined to run
   * `src/cli/sandboxd.ts` through tsx as `npm start` does.
   */
  entry?: string;
  /** Extra daemon flags (after `--port 0 --workspace <tmp>`). */
  args?: readonly string[];
  /** Extra Node flags, such as `--cpu-prof --cpu-prof-dir=DIR`. */
  nodeArgs?: readonly string[];
  /** The node binary that runs the daemon. Default: the bench's own (`process.execPath`). */
  node?: string;
  /** Give up waiting for the daemon after this many milliseconds. Default 20 000. */
  readyTimeoutMs?: number;
}

/** How the daemon's readiness was judged. */
export type ReadyProbe = "health" | "first-rpc";

/** A sandboxd daemon running as a process of its own, and a gRPC client to it. */
export interface Daemon {
  /** The daemon's pid: RSS and start time are its own, not the bench's. */
  readonly pid: number;
  /** Base URL, `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** The workspace root (a fresh temporary directory). */
  readonly workspace: string;
  /** Milliseconds from spawn to readiness (health SERVING, or the first successful RPC). */
  readonly startMs: number;
  /** What {@link startMs} waited for. */
  readonly probe: ReadyProbe;
  /** A client on one HTTP/2 connection. */
  readonly client: Client<typeof SandboxService>;
  /** Creates another client on a connection of its own; closed with the daemon. */
  newClient(): Client<typeof SandboxService>;
  /** A client speaking the Connect protocol over HTTP/1.1 (keep-alive connections). */
  readonly http1Client: Client<typeof SandboxService>;
  /** Resident set size of the daemon, in bytes, from /proc. */
  rssBytes(): number;
  /** CPU time the daemon has used, in milliseconds, from /proc. */
  cpuMs(): number;
  /**
   * The highest RSS, in bytes, seen since the daemon served or the last {@link resetPeakRss}: sampled
   * from /proc every {@link rssSampleMs} ms and at each call.
   */
  peakRssBytes(): number;
  /** Starts a new peak from the RSS now. */
  resetPeakRss(): void;
  /** Stops the daemon (SIGTERM, then SIGKILL) and removes its workspace. */
  stop(): Promise<void>;
}

/**
 * Starts the daemon on port 0 as a separate process (`node --import tsx src/cli/sandboxd.ts`, so its
 * pid is the daemon's own with no tsx wrapper process, or a bundled entry point) and resolves once it serves: once the gRPC health check
 * answers SERVING when the daemon has one, else once a ListProcesses call succeeds.
 */
export async function startDaemon(options: DaemonOptions = {}): Promise<Daemon> {
  const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-bench-")));
  const startedAt = performance.now();
  const child = spawn(
    options.node ?? process.execPath,
    [
      ...(options.nodeArgs ?? []),
      ...(options.entry === undefined
        ? ["--import", "tsx", path.join(repoRoot, "src/cli/sandboxd.ts")]
        : [options.entry]),
      ...["--port", "0", "--workspace", workspace, ...(options.args ?? [])],
    ],
    { cwd: repoRoot, stdio: ["ignore", "ignore", "pipe"], env: daemonEnvironment() },
  );
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let url: string;
  try {
    url = await listeningUrl(child, options.readyTimeoutMs ?? 20_000);
  } catch (error) {
    child.kill("SIGKILL");
    rmSync(workspace, { recursive: true, force: true });
    throw error;
  }
  const connections: SandboxConnection[] = [];
  const newClient = () => {
    // The client's own transport (wide HTTP/2 flow-control windows): the bench measures what users get.
    // Loopback: compressing output would only cost CPU on both sides.
    const connection = createSandboxConnection({ baseUrl: url, acceptCompression: false });
    connections.push(connection);
    return createClient(SandboxService, connection.transport);
  };
  const client = newClient();
  let probe: ReadyProbe;
  try {
    probe = await waitUntilServing(url, client, startedAt + (options.readyTimeoutMs ?? 20_000));
  } catch (error) {
    for (const connection of connections) connection.close();
    child.kill("SIGKILL");
    rmSync(workspace, { recursive: true, force: true });
    throw error;
  }
  const startMs = performance.now() - startedAt;
  const pid = child.pid!;
  let peakRss = readRssBytes(pid);
  const samplePeak = () => {
    peakRss = Math.max(peakRss, readRssBytes(pid));
    return peakRss;
  };
  const sampler = setInterval(samplePeak, rssSampleMs);
  sampler.unref();
  return {
    pid,
    url,
    workspace,
    startMs,
    probe,
    client,
    newClient,
    http1Client: createClient(
      SandboxService,
      createConnectTransport({ baseUrl: url, httpVersion: "1.1", acceptCompression: [] }),
    ),
    rssBytes: () => readRssBytes(pid),
    cpuMs: () => readCpuMs(pid),
    peakRssBytes: samplePeak,
    resetPeakRss: () => {
      peakRss = readRssBytes(pid);
    },
    async stop() {
      clearInterval(sampler);
      for (const connection of connections) connection.close();
      child.kill("SIGTERM");
      const forced = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(forced);
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}

/** Milliseconds between two samples of a daemon's RSS for {@link Daemon.peakRssBytes}. */
export const rssSampleMs = 50;

/** The bench's environment without sandboxd's own variables, so a developer's settings do not leak in. */
function daemonEnvironment(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of Object.keys(env)) if (name.startsWith("SANDBOXD_")) delete env[name];
  return env;
}

/** CPU time a process has used (user + system, from /proc/<pid>/stat), in milliseconds; 0 when gone. */
export function readCpuMs(pid: number): number {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
    // utime and stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return 0;
  }
}

/** Resident set size of a process in bytes (VmRSS of /proc/<pid>/status); 0 when gone. */
export function readRssBytes(pid: number): number {
  try {
    const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return match === null ? 0 : Number(match[1]) * 1024;
  } catch {
    return 0;
  }
}

/**
 * Resolves with the URL a server process logs on stderr (`listening on http://...`), the daemon's or
 * the floor server's; rejects when it exits or `timeoutMs` passes first.
 */
export function listeningUrl(child: ChildProcess, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    const timer = setTimeout(
      () => reject(new Error(`the server did not listen within ${timeoutMs} ms: ${text}`)),
      timeoutMs,
    );
    child.stderr!.setEncoding("utf8");
    const onData = (data: string) => {
      text += data;
      const match = /listening on (http:\/\/\S+)/.exec(text);
      if (match !== null) {
        clearTimeout(timer);
        resolve(match[1]);
        // The daemon logs a line per call from here on: drained unread, so its stderr never fills and
        // the bench spends nothing on it.
        child.stderr!.off("data", onData);
        child.stderr!.resume();
      }
    };
    child.stderr!.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the server exited with ${code} before listening: ${text}`));
    });
  });
}

/**
 * Polls until the daemon serves. The gRPC health check (grpc.health.v1.Health/Check) is spoken raw
 * over HTTP/2, so the bench needs no generated code for it; when the daemon answers UNIMPLEMENTED
 * (no health service yet), the first successful ListProcesses counts instead.
 */
async function waitUntilServing(
  url: string,
  client: Client<typeof SandboxService>,
  deadline: number,
): Promise<ReadyProbe> {
  for (;;) {
    const health = await checkHealth(url).catch(() => "error" as const);
    if (health === "serving") return "health";
    if (health === "unimplemented") {
      try {
        await client.listProcesses({});
        return "first-rpc";
      } catch {
        // Not yet.
      }
    }
    if (performance.now() > deadline) throw new Error("sandboxd did not become ready");
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/** One raw gRPC health check: SERVING is the response message `08 01`. */
function checkHealth(url: string): Promise<"serving" | "not-serving" | "unimplemented" | "error"> {
  return new Promise((resolve) => {
    const session = http2.connect(url);
    session.on("error", () => resolve("error"));
    const stream = session.request({
      ":method": "POST",
      ":path": "/grpc.health.v1.Health/Check",
      "content-type": "application/grpc",
      te: "trailers",
    });
    const body: Buffer[] = [];
    let status: string | undefined;
    let httpStatus = 0;
    stream.on("response", (headers) => {
      httpStatus = Number(headers[":status"]);
      status = headers["grpc-status"] as string | undefined;
    });
    stream.on("trailers", (trailers) => (status = (trailers["grpc-status"] as string | undefined) ?? status));
    stream.on("data", (data: Buffer) => body.push(data));
    stream.on("error", () => resolve("error"));
    stream.on("close", () => {
      session.close();
      const message = Buffer.concat(body).subarray(5);
      // A daemon without the health service answers 404 (no route) or UNIMPLEMENTED.
      if (status === "12" || httpStatus === 404) resolve("unimplemented");
      else if (status === "0")
        resolve(message.length >= 2 && message[0] === 0x08 && message[1] === 0x01 ? "serving" : "not-serving");
      else resolve("error");
    });
    stream.end(Buffer.alloc(5));
  });
}
