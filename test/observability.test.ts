import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessService } from "../gen/process/v1/process_pb.js";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { Launcher } from "../src/process/index.js";
import { waitFor } from "./support/processes.js";
import { collectExec, rpcError, waitForExit } from "./support/rpc.js";

const root = path.resolve(import.meta.dirname, "..");
/** Whether commands get cgroups of their own here (root with writable cgroups): their exits then say what they used. */
const commandsHaveCgroups = (() => {
  const probe = Launcher.create({});
  const cpuUsage = probe.resources?.capabilities.cpuUsage === true;
  probe.close();
  return cpuUsage;
})();
const token = "observability-token-never-logged";

describe("a daemon's logs and metrics, read from a real run", () => {
  let daemon: ChildProcess;
  let stderr = "";
  let url: string;
  let session: Http2SessionManager;
  let workspace: string;
  const lines = () =>
    stderr
      .split("\n")
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>);

  beforeAll(async () => {
    workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-observe-")));
    daemon = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--workspace", workspace, "--log-level", "info"],
      {
        cwd: root,
        env: { ...process.env, SANDBOXD_TOKEN: token },
        stdio: ["ignore", "ignore", "pipe"],
      },
    );
    daemon.stderr!.on("data", (data: Buffer) => (stderr += data.toString()));
    url = (await waitFor(() => /listening on (http:\/\/\S+)/.exec(stderr)?.[1], {
      timeoutMs: 30_000,
      what: "the daemon to listen",
    })) as string;
    session = new Http2SessionManager(url);
  });
  afterAll(() => {
    session?.abort();
    daemon?.kill("SIGKILL");
    rmSync(workspace, { recursive: true, force: true });
  });

  it("a JSON line per call and per process start and exit, refusals logged and counted, no secret anywhere", async () => {
    const withToken: Interceptor = (next) => (request) => (
      request.header.set("authorization", `Bearer ${token}`), next(request)
    );
    const client = createClient(
      SandboxService,
      createGrpcTransport({ baseUrl: url, sessionManager: session, interceptors: [withToken] }),
    );
    const anonymous = createClient(SandboxService, createGrpcTransport({ baseUrl: url, sessionManager: session }));
    const result = await collectExec(client, {
      command: 'printf %s "$SECRET_VALUE"; exit 3',
      env: { SECRET_VALUE: "env-value-never-logged" },
    });
    expect(result.exited.exitCode).toBe(3);
    const started = await client.startProcess({ spec: { command: "sleep", args: ["0.1"] } });
    const sleepExit = await waitForExit(client, started.process!.processId);
    expect((await rpcError(anonymous.listProcesses({}))).rawMessage).toBe("missing bearer token");

    const metricsUrl = `${url}/metrics`;
    expect((await fetch(metricsUrl)).status).toBe(401);
    const metrics = await (await fetch(metricsUrl, { headers: { authorization: `Bearer ${token}` } })).text();
    expect(metrics).toMatch(/^sandboxd_calls_total\{procedure="sandbox\.v1\.SandboxService\/Exec",code="ok"\} 1$/m);
    expect(metrics).toMatch(
      /^sandboxd_call_duration_seconds_count\{procedure="sandbox\.v1\.SandboxService\/StartProcess"\} 1$/m,
    );
    expect(metrics).toMatch(/^sandboxd_process_starts_total\{result="spawned"\} 2$/m);
    // Both exited before the scrape (Exec's exit came with its stream, the other was waited for); every cause is there.
    expect(metrics).toMatch(/^sandboxd_process_exits_total\{cause="exited"\} 2$/m);
    expect(metrics).toMatch(/^sandboxd_process_exits_total\{cause="out_of_memory"\} 0$/m);
    // What the ended processes used, where their cgroups said (a root daemon's commands have their own), beside
    // Node's own sandboxd_process_cpu_seconds_total, the daemon's.
    const usages = [result.exited.usage, sleepExit.usage];
    if (commandsHaveCgroups) expect(usages.every((usage) => usage !== undefined)).toBe(true);
    const cpuSeconds = (mode: "user" | "system") =>
      usages.reduce((sum, usage) => sum + Number(usage?.[mode === "user" ? "cpuUserUs" : "cpuSystemUs"] ?? 0n), 0) /
      1e6;
    const scraped = (mode: string) =>
      Number(new RegExp(`^sandboxd_command_cpu_seconds_total\\{mode="${mode}"\\} (\\S+)$`, "m").exec(metrics)?.[1]);
    expect(scraped("user")).toBeCloseTo(cpuSeconds("user"), 6);
    expect(scraped("system")).toBeCloseTo(cpuSeconds("system"), 6);
    const peaks = usages.filter((usage) => usage?.memoryPeakBytes !== undefined).length;
    expect(metrics).toMatch(new RegExp(`^sandboxd_command_memory_peak_bytes_count ${peaks}$`, "m"));
    expect(metrics).toMatch(/^sandboxd_output_bytes_total\{stream="stdout"\} 22$/m);
    expect(metrics).toMatch(/^sandboxd_auth_failures_total 1$/m);
    expect(metrics).toMatch(/^sandboxd_processes\{status="(failed|completed)"\} \d+$/m);
    expect(metrics).toMatch(/^sandboxd_connections \d+$/m);
    expect(metrics).toMatch(/^sandboxd_process_resident_memory_bytes \d+/m);

    await waitFor(() => lines().filter((line) => line.msg === "process exited").length === 2, {
      what: "both exit lines",
    });
    const logged = lines();
    const calls = logged.filter((line) => line.msg === "call");
    const exec = calls.find((line) => line.procedure === "sandbox.v1.SandboxService/Exec")!;
    expect(exec).toMatchObject({ level: "info", code: "ok", peer: expect.stringMatching(/^127\.0\.0\.1:\d+$/) });
    expect(typeof exec.durationMs).toBe("number");
    const startLine = logged.find((line) => line.msg === "process started" && line.program === "printf")!;
    expect(startLine).toMatchObject({
      cwd: workspace,
      pid: result.started.pid,
      processId: result.started.processId,
      peer: expect.stringMatching(/^127\.0\.0\.1:/),
    });
    expect(typeof startLine.user).toBe("string");
    expect(startLine.command).toBeUndefined();
    const execExitLine = logged.find(
      (line) => line.msg === "process exited" && line.processId === result.started.processId,
    );
    expect(execExitLine).toMatchObject({ status: "failed", exitCode: 3, cause: "exited" });
    // The exit line carries what the record says it used, figure for figure.
    const sleepExitLine = logged.find(
      (line) => line.msg === "process exited" && line.processId === started.process!.processId,
    );
    for (const [line, usage] of [
      [execExitLine, result.exited.usage],
      [sleepExitLine, sleepExit.usage],
    ] as const) {
      const expected =
        usage === undefined
          ? undefined
          : Object.fromEntries(
              Object.entries({
                cpuUserUs: usage.cpuUserUs,
                cpuSystemUs: usage.cpuSystemUs,
                memoryPeakBytes: usage.memoryPeakBytes,
                ioReadBytes: usage.ioReadBytes,
                ioWriteBytes: usage.ioWriteBytes,
                oomKills: usage.oomKills,
              }).flatMap(([name, value]) => (value === undefined ? [] : [[name, Number(value)]])),
            );
      expect(line?.usage).toEqual(expected);
    }
    expect(logged.some((line) => line.level === "warn" && String(line.msg).startsWith("call refused"))).toBe(true);
    expect(stderr).not.toContain(token);
    expect(stderr).not.toContain("env-value-never-logged");
  });

  it("counts and logs a process.v1 Execute's process as its own: started, exited, with its cause", async () => {
    const withToken: Interceptor = (next) => (request) => (
      request.header.set("authorization", `Bearer ${token}`), next(request)
    );
    const scrape = async () =>
      (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
    const count = (metrics: string, series: string) =>
      Number(new RegExp(`^${series.replace(/[{}"]/g, "\\$&")} (\\d+)$`, "m").exec(metrics)?.[1] ?? Number.NaN);
    const before = await scrape();
    const processes = createClient(
      ProcessService,
      createGrpcTransport({ baseUrl: url, sessionManager: session, interceptors: [withToken] }),
    );
    const result = await processes.execute({ config: { command: ["uname", "-s"] } });
    expect(result.exitCode).toBe(0);
    const after = await scrape();
    for (const series of [
      'sandboxd_process_starts_total{result="spawned"}',
      'sandboxd_process_exits_total{cause="exited"}',
    ]) {
      expect(Number.isInteger(count(before, series)), series).toBe(true);
      expect(count(after, series)).toBe(count(before, series) + 1);
    }
    expect(after).toMatch(/^sandboxd_calls_total\{procedure="process\.v1\.ProcessService\/Execute",code="ok"\} 1$/m);
    await waitFor(() => lines().some((line) => line.msg === "process exited" && line.program === "uname"), {
      what: "the Execute's exit line",
    });
    const startLine = lines().find((line) => line.msg === "process started" && line.program === "uname");
    expect(startLine).toMatchObject({ cwd: workspace, peer: expect.stringMatching(/^127\.0\.0\.1:/) });
    expect(lines().find((line) => line.msg === "process exited" && line.program === "uname")).toMatchObject({
      status: "completed",
      exitCode: 0,
      cause: "exited",
      processId: startLine!.processId,
    });
  });
});
