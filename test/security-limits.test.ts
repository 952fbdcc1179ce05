import { chmodSync } from "node:fs";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { Launcher, reapOrphans, resolveUser } from "../src/process/index.js";
import { processesWithMarker, waitFor } from "./support/processes.js";
import { Code, collectExec, rpcError, sleepMarker, sleepers, streamError, type SandboxClient } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

describe("limits answer RESOURCE_EXHAUSTED naming the limit", () => {
  let test: TestServer | undefined;
  const newConnection = (): SandboxClient => test!.connect();
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("live processes", async () => {
    test = await startTestServer({ maxProcesses: 2 });
    const marker = sleepMarker();
    await test.client.startProcess({ spec: { command: "sleep", args: [marker] } });
    await test.client.startProcess({ spec: { command: "sleep", args: [marker] } });
    const error = await rpcError(test.client.startProcess({ spec: { command: "sleep", args: [marker] } }));
    expect(error.code).toBe(Code.ResourceExhausted);
    expect(error.rawMessage).toBe("too many processes: the limit of 2 live processes is reached");
    const exec = await streamError(test.client.exec({ spec: { command: "true" } }));
    expect(exec.code).toBe(Code.ResourceExhausted);
  });

  it("retained output per process: older bytes are dropped, never the daemon's memory", async () => {
    test = await startTestServer({ outputCapacityBytes: 4096 });
    const { process } = await test.client.startProcess({
      spec: { command: "head -c 100000 /dev/zero", autoCleanup: false },
    });
    await waitFor(async () => (await test!.client.getProcess({ processId: process!.processId })).process?.exit);
    const logs = await test.client.getProcessLogs({ processId: process!.processId });
    // The newest chunk (one pipe read, at most 64 KiB) is always kept whole.
    expect(logs.stdout.length, `retained ${logs.stdout.length}`).toBeLessThanOrEqual(4096 + 64 * 1024);
    expect(Number(logs.stdoutOffset) + logs.stdout.length).toBe(100_000);
  });

  it("request message size", async () => {
    test = await startTestServer({ maxMessageBytes: 64 * 1024 });
    const error = await streamError(
      test.client.exec({ spec: { command: "cat", stdinData: new Uint8Array(100 * 1024) } }),
    );
    expect(error.code).toBe(Code.ResourceExhausted);
    expect(error.rawMessage).toMatch(/message size \d+ is larger than configured readMaxBytes 65536/);
    // A message under the limit still goes through on the same server.
    const ok = await collectExec(test.client, { command: "wc -c", stdinData: new Uint8Array(1000) });
    expect(ok.stdout.toString().trim()).toBe("1000");
    expect(test.server.manager.list().filter((managed) => managed.description.command === "cat")).toHaveLength(0);
  });

  it("concurrent calls on one connection, counted back down when calls end", async () => {
    test = await startTestServer({ callLimits: { maxCallsPerConnection: 3 } });
    const marker = sleepMarker();
    const { process } = await test.client.startProcess({ spec: { command: "sleep", args: [marker] } });
    const processId = process!.processId;
    const client = newConnection();
    const aborts = [new AbortController(), new AbortController(), new AbortController()];
    const readers = aborts.map((abort) =>
      drainQuietly(client.streamLogs({ processId, follow: true }, { signal: abort.signal })),
    );
    await waitFor(() => test!.server.manager.get(processId) && readers.length === 3);
    await waitFor(
      async () =>
        (await rpcError(client.getProcess({ processId })).catch(() => undefined))?.code === Code.ResourceExhausted,
      {
        what: "the fourth call to be refused",
      },
    );
    const refused = await rpcError(client.getProcess({ processId }));
    expect(refused.rawMessage).toBe(
      "too many calls on this connection: the limit of 3 concurrent calls per connection is reached",
    );
    const refusedStream = await streamError(client.streamLogs({ processId, follow: true }));
    expect(refusedStream.code).toBe(Code.ResourceExhausted);
    // Another connection is not affected.
    await expect(newConnection().getProcess({ processId })).resolves.toBeDefined();
    // Ending one stream frees its slot.
    aborts[0].abort();
    await waitFor(
      async () =>
        await client
          .getProcess({ processId })
          .then(() => true)
          .catch(() => false),
      { what: "a freed slot" },
    );
    for (const abort of aborts) abort.abort();
    await Promise.all(readers);
  });

  it("concurrent calls on the whole daemon", async () => {
    test = await startTestServer({ callLimits: { maxCalls: 2 } });
    const { process } = await test.client.startProcess({ spec: { command: "sleep", args: [sleepMarker()] } });
    const processId = process!.processId;
    const abort = new AbortController();
    const readers = [newConnection(), newConnection()].map((client) =>
      drainQuietly(client.streamLogs({ processId, follow: true }, { signal: abort.signal })),
    );
    await waitFor(
      async () =>
        (await rpcError(newConnection().getProcess({ processId })).catch(() => undefined))?.code ===
        Code.ResourceExhausted,
      {
        what: "the third call to be refused",
      },
    );
    const refused = await rpcError(newConnection().getProcess({ processId }));
    expect(refused.rawMessage).toBe("too many calls: the limit of 2 concurrent calls is reached");
    abort.abort();
    await Promise.all(readers);
    await waitFor(
      async () =>
        newConnection()
          .getProcess({ processId })
          .then(() => true)
          .catch(() => false),
      { what: "the limit to free up" },
    );
  });
});

const launcher = Launcher.create({ maxTasksPerCommand: 20 });

describe.skipIf(launcher.forkLimit() === "none")(`a fork bomb is capped (${launcher.forkLimit()})`, () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("a command cannot have more than its task limit, and others still run", async () => {
    test = await startTestServer({ launcher });
    const marker = sleepMarker();
    const exec = collectExec(test.client, {
      command: `for i in $(seq 1 100); do sleep ${marker} & done; wait`,
      timeoutMs: 20_000,
    });
    let most = 0;
    const settled = exec.then(
      () => true,
      () => true,
    );
    while (!(await Promise.race([settled, new Promise((resolve) => setTimeout(() => resolve(false), 20))]))) {
      most = Math.max(most, sleepers(marker).length);
    }
    const result = await exec;
    expect(result.stderr.toString()).toMatch(/fork/i);
    expect(most).toBeLessThanOrEqual(20);
    expect(result.exited.exitCode).not.toBe(0);
    await waitFor(() => sleepers(marker).length === 0, { what: "the capped command's sleepers to be gone" });
  });

  it("a real fork bomb stays capped, is killed by its timeout and leaves nothing behind", async () => {
    test = await startTestServer({ launcher });
    const marker = `bomb${sleepMarker()}`;
    const started = Date.now();
    const result = await collectExec(test.client, { command: `b() { b | b & }; b # ${marker}`, timeoutMs: 1500 });
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(result.cases.at(-1)).toBe("exited");
    await waitFor(() => processesWithMarker(marker).length === 0, { timeoutMs: 10_000, what: "the bomb to be gone" });
    // The daemon still serves others.
    expect((await collectExec(test.client, { command: "echo alive" })).stdout.toString()).toBe("alive\n");
  });
});

describe.skipIf(launcher.forkLimit() !== "cgroup-pids")("per-command cgroups are reused once empty", () => {
  let test: TestServer | undefined;
  // As the daemon does: the escaped sleep, killed, comes back to this process as a zombie and is
  // reaped here, so its cgroup drains; left to init, the cgroup is not reused until init reaps it.
  beforeAll(() => {
    expect(reapOrphans().state).toBe("reaping");
  });
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("sequential commands take turns in a few cgroups, with their cap, after what escaped in them was killed", async () => {
    test = await startTestServer({ launcher: Launcher.create({ maxTasksPerCommand: 20 }) });
    const marker = sleepMarker();
    const pidsCgroup = (text: string) => /^\d+:pids:(.*)$/m.exec(text)?.[1];
    const used = new Set<string | undefined>();
    for (let index = 0; index < 10; index++) {
      const result = await collectExec(test.client, {
        command: `setsid sleep ${marker} & cat /proc/self/cgroup; cat /sys/fs/cgroup/pids$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup)/pids.max`,
      });
      used.add(pidsCgroup(result.stdout.toString()));
      expect(result.stdout.toString().trim().split("\n").at(-1)).toBe("20");
      await waitFor(() => sleepers(marker).length === 0, { what: "the escaped sleep to be killed with its cgroup" });
    }
    // Without reuse, ten commands make ten cgroups.
    expect(used.size).toBeLessThanOrEqual(3);
  });
});

const sharedCap = Launcher.create({ maxTasksPerCommand: 100, maxTasksTotal: 150 });

describe.skipIf(sharedCap.forkLimit() !== "cgroup-pids")("the tasks of all commands together are capped", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("three commands of 100 tasks each hold at most 150 between them", async () => {
    expect(sharedCap.maxTasksTotal).toBe(150);
    test = await startTestServer({ launcher: sharedCap });
    const marker = sleepMarker();
    // Each forks 100 sleeps and keeps going when a fork fails (a shell would exit), then sleeps itself.
    const forker = `for (1..100) { my $pid = fork; if (defined $pid && $pid == 0) { exec "sleep", "${marker}" } } sleep 600`;
    for (let index = 0; index < 3; index++) {
      await test.client.startProcess({ spec: { command: "perl", args: ["-e", forker] } });
    }
    // Each command alone may have 100 tasks: more than 100 together shows they ran side by side.
    await waitFor(() => sleepers(marker).length > 100, { what: "more than 100 sleepers" });
    let most = 0;
    const until = Date.now() + 500;
    while (Date.now() < until) {
      most = Math.max(most, sleepers(marker).length);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(most).toBeLessThanOrEqual(150);
    await test.client.killAllProcesses({ signal: "SIGKILL" });
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleepers to be gone" });
  });
});

async function drainQuietly(stream: AsyncIterable<unknown>): Promise<void> {
  try {
    for await (const _ of stream) {
      // Drain.
    }
  } catch {
    // Cancelled on purpose.
  }
}

const fallback = Launcher.create({ maxTasksPerCommand: 37, cgroups: false, traceTasks: false });

describe.skipIf(process.getuid?.() !== 0 || fallback.forkLimit(65534) !== "rlimit-nproc")(
  "the RLIMIT_NPROC fallback without cgroups",
  () => {
    it("sets RLIMIT_NPROC for a command run as another user, and nothing for root", async () => {
      const test = await startTestServer(
        { launcher: fallback, runAs: resolveUser("nobody"), token: "fallback-token" },
        { sendToken: true },
      );
      try {
        chmodSync(test.workspace, 0o755);
        const limited = await collectExec(test.client, { command: "cat /proc/self/limits | grep 'Max processes'" });
        expect(limited.stdout.toString()).toMatch(/Max processes\s+37\s+37/);
        expect(fallback.forkLimit(0)).toBe("none");
      } finally {
        await test.close();
      }
    });
  },
);
