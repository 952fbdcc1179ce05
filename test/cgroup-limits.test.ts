import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import { ExitCause, SandboxService, StartStage } from "../gen/sandbox/v1/sandbox_pb.js";
import { type DaemonProcess, startDaemonProcess } from "./support/daemon-process.js";
import { Launcher } from "../src/process/index.js";
import { runCli } from "./support/cli.js";
import { expectReason } from "./support/errors.js";
import { isAlive, waitFor } from "./support/processes.js";
import { collectExec, rpcError, streamError, waitForExit } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const mib = 1024 * 1024;
const probe = Launcher.create({ resources: { memoryBytes: 512 * mib } });
const capabilities = probe.resources?.capabilities;
probe.close();
const hasPython = ["/usr/bin/python3", "/usr/local/bin/python3"].some((file) => existsSync(file));
const whyNot =
  capabilities === undefined
    ? "no writable cgroup for commands here (not root, or a read-only /sys/fs/cgroup)"
    : !capabilities.memoryLimit
      ? "no writable memory controller for commands here"
      : !hasPython
        ? "python3 is not installed"
        : undefined;
if (whyNot !== undefined) console.warn(`cgroup-limits: skipped: ${whyNot}`);

/** A python3 program (argv form: no shell between it and the daemon) that allocates `mebibytes` MiB, touches every page, prints "held", then runs `then`. */
const allocate = (mebibytes: number, then = "") => ({
  command: "python3",
  args: [
    "-c",
    `import time; x = bytearray(${mebibytes} * 1024 * 1024); x[::4096] = b'1' * len(x[::4096]); print('held', flush=True); ${then}`,
  ],
});

/**
 * Starts a command that leaves a double-forked daemon in a session of its own (`setsid`, out of its
 * process group) and sleeps; resolves with the command's id and the daemon's pid once it runs.
 */
async function startWithSetsidDaemon(
  server: TestServer,
  pidFile: string,
  timeoutMs = 0,
): Promise<{ id: string; daemonPid: number }> {
  const started = await server.client.startProcess({
    spec: {
      command: `setsid sh -c 'sleep 86421 & echo $! > ${pidFile}; wait' > /dev/null 2>&1 < /dev/null & sleep 86421`,
      timeoutMs,
    },
  });
  const daemonPid = await waitFor<number | undefined>(
    () => {
      try {
        const text = readFileSync(path.join(server.workspace, pidFile), "utf8").trim();
        return text === "" ? undefined : Number(text);
      } catch {
        return undefined;
      }
    },
    { what: "the setsid daemon's pid" },
  );
  if (daemonPid === undefined || !isAlive(daemonPid)) throw new Error("the setsid daemon did not start");
  return { id: started.process!.processId, daemonPid };
}

/** The argv of a command in argv form. */
const argv = (command: { command: string; args: string[] }) => [command.command, ...command.args];

describe.skipIf(whyNot !== undefined)("per-command cgroups: limits, usage, memory kills, tree kill", () => {
  let test: TestServer;
  beforeAll(async () => {
    test = await startTestServer({
      launcher: Launcher.create({ resources: { memoryBytes: 512 * mib } }),
      commandLimits: { maxMemoryBytes: 400 * mib, maxCpuMillis: 1500 },
    });
  });
  afterAll(async () => {
    await test?.close();
  });

  it("a command allocating past its memory limit is killed by the kernel and reported so, with its peak", async () => {
    const hog = await collectExec(test.client, {
      ...allocate(200),
      limits: { memoryBytes: BigInt(64 * mib) },
    });
    expect(hog.exited.signal).toBe("SIGKILL");
    expect(hog.exited.killed).toBe(false);
    expect(hog.exited.cause).toBe(ExitCause.OUT_OF_MEMORY);
    expect(hog.exited.usage?.oomKills).toBeGreaterThanOrEqual(1);
    const peak = Number(hog.exited.usage?.memoryPeakBytes);
    expect(peak).toBeGreaterThan(32 * mib);
    expect(peak).toBeLessThanOrEqual(64 * mib);
    // The same allocation under the daemon's default runs to its end: the limit was its own.
    const fits = await collectExec(test.client, allocate(100));
    expect(fits.exited.exitCode).toBe(0);
    expect(fits.exited.cause).toBe(ExitCause.EXITED);
    expect(fits.exited.usage?.oomKills).toBe(0);
    expect(Number(fits.exited.usage?.memoryPeakBytes)).toBeGreaterThan(100 * mib);
  });

  it("two commands with different limits: one's excess never touches the other", async () => {
    const big = await test.client.startProcess({
      spec: { ...allocate(150, "time.sleep(60)"), limits: { memoryBytes: BigInt(300 * mib) } },
    });
    const bigId = big.process!.processId;
    await waitFor(
      async () =>
        (await test.client.getProcessLogs({ processId: bigId })).stdout.length > 0 ||
        (await test.client.getProcess({ processId: bigId })).process!.status !== 2,
      { what: "the 150 MiB command holding its memory", timeoutMs: 30_000 },
    );
    // Four hogs at once, each past its own 80 MiB: each dies alone.
    const hogs = await Promise.all(
      [1, 2, 3, 4].map(() => collectExec(test.client, { ...allocate(120), limits: { memoryBytes: BigInt(80 * mib) } })),
    );
    for (const hog of hogs) {
      expect(hog.exited.signal).toBe("SIGKILL");
      expect(hog.exited.cause).toBe(ExitCause.OUT_OF_MEMORY);
      expect(hog.exited.usage?.oomKills).toBeGreaterThanOrEqual(1);
    }
    const info = (await test.client.getProcess({ processId: bigId })).process!;
    expect(info.exit).toBeUndefined();
    expect(Number(info.usage?.memoryCurrentBytes)).toBeGreaterThan(150 * mib);
    expect(info.usage?.oomKills).toBe(0);
    await test.client.killProcess({ processId: bigId, signal: "SIGKILL" });
    const exited = await waitForExit(test.client, bigId);
    expect(exited.killed).toBe(true);
    expect(exited.cause).toBe(ExitCause.KILLED_ON_REQUEST);
    expect(exited.usage?.oomKills).toBe(0);
  });

  it("a double-forked setsid daemon is gone after KillProcess, and after a timeout", async () => {
    const killed = await startWithSetsidDaemon(test, "killed.pid");
    await test.client.killProcess({ processId: killed.id, signal: "SIGKILL" });
    expect((await waitForExit(test.client, killed.id)).cause).toBe(ExitCause.KILLED_ON_REQUEST);
    await waitFor(() => !isAlive(killed.daemonPid), { what: "the setsid daemon gone", timeoutMs: 10_000 });

    const timed = await startWithSetsidDaemon(test, "timed.pid", 1500);
    expect((await waitForExit(test.client, timed.id, 30_000)).cause).toBe(ExitCause.TIMED_OUT);
    await waitFor(() => !isAlive(timed.daemonPid), { what: "the setsid daemon gone", timeoutMs: 10_000 });
  });

  it("a double-forked setsid daemon is gone after the daemon's shutdown", async () => {
    const own = await startTestServer({ launcher: Launcher.create({ resources: { memoryBytes: 512 * mib } }) });
    let closed = false;
    try {
      const started = await startWithSetsidDaemon(own, "shutdown.pid");
      await own.close();
      closed = true;
      await waitFor(() => !isAlive(started.daemonPid), { what: "the setsid daemon gone", timeoutMs: 10_000 });
    } finally {
      if (!closed) await own.close();
    }
  });

  it("usage is there and plausible: a busy loop's CPU time, and CPU time capped by a quota", async () => {
    const busy = await collectExec(test.client, {
      command: "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done",
    });
    expect(busy.exited.exitCode).toBe(0);
    const usage = busy.exited.usage!;
    expect(Number(usage.cpuUserUs) + Number(usage.cpuSystemUs)).toBeGreaterThan(10_000);
    expect(Number(usage.memoryPeakBytes)).toBeGreaterThan(0);
    const quota = await collectExec(test.client, {
      command: "timeout 1 sh -c 'while :; do :; done'; true",
      limits: { cpuMillis: 100 },
    });
    const used = Number(quota.exited.usage!.cpuUserUs) + Number(quota.exited.usage!.cpuSystemUs);
    // A tenth of one CPU over about a second: far below the second it would use unthrottled.
    expect(used).toBeLessThan(500_000);
  });

  it("sandbox exec --memory, --cpus and --tasks: the limits hold, -o json shows the usage, a bad size is a usage error", async () => {
    const exec = (args: readonly string[]) => runCli(["exec", ...args], { url: test.server.url });
    const hog = await exec([
      "--memory",
      "64m",
      "--cpus",
      "0.5",
      "--tasks",
      "50",
      "-o",
      "json",
      "--",
      ...argv(allocate(200)),
    ]);
    expect(hog.code).toBe(137);
    const printed = JSON.parse(hog.stdout.toString());
    expect(printed).toMatchObject({ exitCode: 137, signal: "SIGKILL", cause: "out_of_memory" });
    expect(printed.usage.oomKills).toBeGreaterThanOrEqual(1);
    expect(printed.usage.memoryPeakBytes).toBeLessThanOrEqual(64 * mib);
    // Without -o json, the one line on stderr says why.
    const said = await exec(["--memory", "64m", "--", ...argv(allocate(200))]);
    expect(said.code).toBe(137);
    expect(said.stderr.toString()).toMatch(/^sandbox: killed for memory \(SIGKILL\)$/m);
    const tasks = await exec(["--tasks", "3", "--", "sh", "-c", "sleep 5 & sleep 5 & sleep 5 & sleep 5 & wait"]);
    expect(tasks.stderr.toString()).toMatch(/fork|resource|Cannot/i);
    const bad = await exec(["--memory", "lots", "--", "true"]);
    expect(bad.code).toBe(125);
    expect(bad.stderr.toString()).toMatch(/--memory.*not a size/);
    const above = await exec(["--memory", "1g", "--", "true"]);
    expect(above.code).toBe(125);
    expect(above.stderr.toString()).toMatch(/max-command-memory-bytes/);
  });

  it("a limit above the daemon's cap is INVALID_ARGUMENT naming the cap", async () => {
    expectReason(
      await streamError(test.client.exec({ spec: { command: "true", limits: { memoryBytes: BigInt(401 * mib) } } })),
      {
        code: Code.InvalidArgument,
        reason: "LIMIT_ABOVE_CAP",
        metadata: {
          field: "limits.memory_bytes",
          cap: "max-command-memory-bytes",
          max: String(400 * mib),
          value: String(401 * mib),
        },
      },
    );
    expectReason(await rpcError(test.client.startProcess({ spec: { command: "true", limits: { cpuMillis: 1501 } } })), {
      code: Code.InvalidArgument,
      reason: "LIMIT_ABOVE_CAP",
      metadata: { field: "limits.cpu_millis", cap: "max-command-cpus", max: "1500", value: "1501" },
    });
    expectReason(await rpcError(test.client.startProcess({ spec: { command: "true", limits: { memoryBytes: 5n } } })), {
      code: Code.InvalidArgument,
      reason: "INVALID_ARGUMENT",
      metadata: { field: "limits.memory_bytes" },
    });
  });
});

/**
 * The directory of the daemon's cgroup, parent of its commands', in the hierarchy of `controller`:
 * read from a command's own /proc/self/cgroup (the daemon's is not its commands'), under the mount
 * of that controller (v1), or of cgroup2 when the controller is there.
 */
async function daemonCgroupOf(server: TestServer, controller: string, limits = {}): Promise<string | undefined> {
  const run = await collectExec(server.client, { command: "cat", args: ["/proc/self/cgroup"], limits });
  const lines = run.stdout.toString().split("\n");
  const mounts = readFileSync("/proc/self/mountinfo", "utf8").split("\n");
  for (const line of lines) {
    const [, controllers, own] = line.split(":");
    if (own === undefined || !controllers.split(",").includes(controller)) continue;
    for (const mount of mounts) {
      const [before, after] = mount.split(" - ");
      const [fsType, , options = ""] = after?.split(" ") ?? [];
      if (fsType === "cgroup" && options.split(",").includes(controller))
        return path.dirname(path.join(before.split(" ")[4], own));
    }
  }
  return undefined;
}

describe.skipIf(whyNot !== undefined)("a start that fails at the cgroup steps", () => {
  let test: TestServer;
  beforeAll(async () => {
    test = await startTestServer({ launcher: Launcher.create({ resources: { memoryBytes: 512 * mib } }) });
  });
  afterAll(async () => {
    await test?.close();
  });

  it("is START_FAILED at cgroup, with the errno, when the command's cgroup cannot be made", async (context) => {
    const parent = await daemonCgroupOf(test, "memory");
    if (parent === undefined) return context.skip("commands have no v1 memory cgroup here");
    console.log(`the daemon's memory cgroup: ${parent}`);
    // The commands' parent taken away (an operator's cleanup, a container runtime's): the next command's own
    // cgroup cannot be made there. Once the last command's cgroup is gone, the parent is empty and goes.
    await waitFor(
      () => {
        try {
          rmdirSync(parent);
          return true;
        } catch {
          return false;
        }
      },
      { what: "the daemon's memory cgroup to be empty" },
    );
    try {
      const failed = await collectExec(test.client, { command: "true", args: [] });
      expect(failed.exited.cause).toBe(ExitCause.START_FAILED);
      expect(failed.exited.causeDetail?.startStage).toBe(StartStage.CGROUP);
      expect(failed.exited.causeDetail?.errno).toBe("ENOENT");
      expect(failed.exited.exitCode).toBe(126);
    } finally {
      mkdirSync(parent);
    }
    // Back, the commands start again.
    expect((await collectExec(test.client, { command: "true", args: [] })).exited.cause).toBe(ExitCause.EXITED);
  });

  it("is START_FAILED at limits, with the errno, when the kernel refuses the command's limit", async (context) => {
    const parent = await daemonCgroupOf(test, "cpu", { cpuMillis: 500 });
    if (parent === undefined) return context.skip("commands have no v1 cpu cgroup here");
    console.log(`the daemon's cpu cgroup: ${parent}`);
    // A CPU quota above the parent's is refused by cgroup v1 (EINVAL): the daemon's cgroup held to half a CPU,
    // as a container's limit would hold it, and a command asking for a whole one.
    writeFileSync(path.join(parent, "cpu.cfs_period_us"), "100000");
    writeFileSync(path.join(parent, "cpu.cfs_quota_us"), "50000");
    try {
      const failed = await collectExec(test.client, { command: "true", args: [], limits: { cpuMillis: 1000 } });
      expect(failed.exited.cause).toBe(ExitCause.START_FAILED);
      expect(failed.exited.causeDetail?.startStage).toBe(StartStage.LIMITS);
      expect(failed.exited.causeDetail?.errno).toBe("EINVAL");
    } finally {
      writeFileSync(path.join(parent, "cpu.cfs_quota_us"), "-1");
    }
    const fits = await collectExec(test.client, { command: "true", args: [], limits: { cpuMillis: 1000 } });
    expect(fits.exited.cause).toBe(ExitCause.EXITED);
  });
});

describe("a limit the daemon cannot enforce", () => {
  let test: TestServer;
  beforeAll(async () => {
    test = await startTestServer({ launcher: Launcher.create({ resources: false }) });
  });
  afterAll(async () => {
    await test?.close();
  });

  it("is FAILED_PRECONDITION naming the field and the controller, and usage is absent, not zero", async () => {
    expectReason(
      await rpcError(
        test.client.startProcess({ spec: { command: "true", limits: { memoryBytes: BigInt(64 * mib) } } }),
      ),
      {
        code: Code.FailedPrecondition,
        reason: "LIMIT_NOT_ENFORCEABLE",
        metadata: { field: "limits.memory_bytes", controller: "memory" },
      },
    );
    const plain = await collectExec(test.client, { command: "true" });
    expect(plain.exited.usage).toBeUndefined();
  });
});

const asRoot = process.getuid?.() === 0;
const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((file) => existsSync(file));
/**
 * Whether uid 65534 can read this checkout's tsx (a clone under a 0700 directory, such as `mktemp -d`
 * makes, cannot be): the daemon below runs from it as that user.
 */
const checkoutReadableByNobody =
  setpriv !== undefined &&
  spawnSync(setpriv, [
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "test",
    "-r",
    path.resolve(import.meta.dirname, "../node_modules/tsx/package.json"),
  ]).status === 0;
if (setpriv !== undefined && !checkoutReadableByNobody)
  console.warn("cgroup-limits: the start line as another user is skipped: uid 65534 cannot read this checkout");

describe("the daemon's start line says what it can enforce and report per command", () => {
  const daemons: DaemonProcess[] = [];
  const workspaces: string[] = [];
  afterAll(async () => {
    for (const daemon of daemons) {
      daemon.child.kill("SIGTERM");
      await daemon.exited();
    }
    for (const workspace of workspaces) rmSync(workspace, { recursive: true, force: true });
  });

  it.skipIf(whyNot !== undefined)(
    "with writable cgroups: memory and CPU limits, CPU time, peak memory, kills for memory",
    async () => {
      const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-start-line-"));
      workspaces.push(workspace);
      const daemon = await startDaemonProcess(["--workspace", workspace]);
      daemons.push(daemon);
      await waitFor(() => daemon.stderr().includes("per command:"), { what: "the start line" });
      expect(daemon.stderr()).toMatch(
        /per command: limits memory and CPU, usage CPU time, peak memory, kills for memory/,
      );
      // Never a bare sweep where a freezer is there to use: cgroup.kill or cgroup.freeze (v2), else v1's freezer.
      const freezer =
        existsSync("/sys/fs/cgroup/freezer/cgroup.procs") ||
        readFileSync("/proc/self/mountinfo", "utf8").includes(" - cgroup2 ");
      if (freezer) expect(daemon.stderr()).toMatch(/tree kill by (cgroup\.kill|freezing its cgroup, then SIGKILL)/);
    },
  );

  it.skipIf(!asRoot || setpriv === undefined || !checkoutReadableByNobody)(
    "as a user without cgroups: limits refused, usage unknown, and an exit record carries no usage",
    async () => {
      const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-start-line-"));
      workspaces.push(workspace);
      chmodSync(workspace, 0o777);
      const daemon = await startDaemonProcess(["--workspace", workspace], {
        file: setpriv!,
        args: [
          "--reuid=65534",
          "--regid=65534",
          "--clear-groups",
          process.execPath,
          "--import",
          "tsx",
          "src/cli/sandboxd.ts",
        ],
        env: { ...process.env, HOME: workspace },
      });
      daemons.push(daemon);
      await waitFor(() => daemon.stderr().includes("per command:"), { what: "the start line" });
      expect(daemon.stderr()).toContain(
        "per command: no cgroups of its own (not root, or no writable cgroup filesystem): memory and CPU limits are refused, usage and kills for memory unknown",
      );
      const session = new Http2SessionManager(daemon.url);
      try {
        const client = createClient(
          SandboxService,
          createGrpcTransport({ baseUrl: daemon.url, sessionManager: session }),
        );
        const plain = await collectExec(client, { command: "true" });
        expect(plain.exited.exitCode).toBe(0);
        expect(plain.exited.usage).toBeUndefined();
        expectReason(
          await streamError(client.exec({ spec: { command: "true", limits: { memoryBytes: BigInt(64 * mib) } } })),
          {
            code: Code.FailedPrecondition,
            reason: "LIMIT_NOT_ENFORCEABLE",
            metadata: { field: "limits.memory_bytes", controller: "memory" },
          },
        );
      } finally {
        session.abort();
      }
    },
  );
});
