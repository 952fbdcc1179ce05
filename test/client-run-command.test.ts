import { getEventListeners } from "node:events";
import { chmodSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CommandFinished,
  connect,
  SandboxError,
  type Command,
  type CommandLog,
  type Sandbox,
} from "../src/client/index.js";
import { resolveUser } from "../src/process/index.js";
import { waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
let sandbox: Sandbox;
beforeAll(async () => {
  t = await startTestServer();
  sandbox = await connect({ baseUrl: t.server.url });
});
afterAll(async () => {
  await sandbox.close();
  await t.close();
});

describe("runCommand, blocking (seed 003)", () => {
  it("returns a CommandFinished with exitCode 0 for echo hello", async () => {
    const result = await sandbox.runCommand("echo", ["hello"]);
    expect(result).toBeInstanceOf(CommandFinished);
    expect(result.exitCode).toBe(0);
    expect(result.stdout()).toBe("hello\n");
  });

  it("a timeout SIGKILLs and returns a non-zero exit code after about the timeout", async () => {
    const marker = sleepMarker(100);
    const started = Date.now();
    const result = await sandbox.runCommand("sleep", [marker], { timeoutMs: 100 });
    const elapsed = Date.now() - started;
    expect(result.exitCode).not.toBe(0);
    expect(result.exitCode).toBe(137);
    expect(result.signal).toBe("SIGKILL");
    expect(result.timedOut).toBe(true);
    expect(result.cause).toBe("timed_out");
    expect(elapsed).toBeGreaterThanOrEqual(90);
    expect(elapsed).toBeLessThan(3000);
    expect(sleepers(marker)).toEqual([]);
  });

  it("captures stderr separately", async () => {
    const result = await sandbox.runCommand("sh", ["-c", "echo to-out; echo to-err >&2"]);
    expect(result.stdout()).toBe("to-out\n");
    expect(result.stderr()).toBe("to-err\n");
  });

  it("takes cwd and env", async () => {
    const result = await sandbox.runCommand("sh", ["-c", 'echo "$WHO in $(pwd)"'], {
      cwd: t.workspace,
      env: { WHO: "me" },
    });
    expect(result.stdout()).toBe(`me in ${t.workspace}\n`);
  });

  it("a signal cancels: the run rejects with its reason and the process is gone", async () => {
    const marker = sleepMarker();
    const controller = new AbortController();
    const running = sandbox.runCommand("sleep", [marker], { signal: controller.signal });
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep" });
    controller.abort(new Error("cancelled"));
    await expect(running).rejects.toThrow("cancelled");
    await waitFor(() => sleepers(marker).length === 0, { what: "the cancelled sleep to be gone" });
  });

  it("sudo is refused clearly where the daemon does not allow it", async () => {
    const error = await sandbox.runCommand("id", ["-u"], { sudo: true }).catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(SandboxError);
    expect(error).toMatchObject({ code: "PERMISSION_DENIED", reason: "SUDO_NOT_ALLOWED" });
  });

  it.skipIf(process.getuid?.() !== 0)("sudo runs as root where the daemon allows it", async () => {
    const own = await startTestServer({ allowSudo: true, runAs: resolveUser("nobody"), token: "run-command-token" });
    chmodSync(own.workspace, 0o755);
    const client = await connect({ baseUrl: own.server.url, token: "run-command-token" });
    try {
      expect((await client.runCommand("id", ["-u"], { sudo: true })).stdout()).toBe("0\n");
      expect((await client.runCommand("id", ["-u"])).stdout()).toBe(`${resolveUser("nobody").uid}\n`);
    } finally {
      await client.close();
      await own.close();
    }
  });
});

describe("runCommand, detached (seed 003)", () => {
  it("returns a Command before the process exits", async () => {
    const marker = sleepMarker(5);
    const started = Date.now();
    const command: Command = await sandbox.runCommand({ cmd: "sleep", args: [marker], detached: true });
    expect(Date.now() - started).toBeLessThan(2000);
    expect(command.status).toBe("running");
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep" });
    await command.kill("SIGKILL");
    await command.wait();
  });

  it("wait() returns a CommandFinished when the process exits", async () => {
    const command = await sandbox.runCommand({
      cmd: "sh",
      args: ["-c", "sleep 0.1; echo finished; exit 5"],
      detached: true,
    });
    const finished = await command.wait();
    expect(finished).toBeInstanceOf(CommandFinished);
    expect(finished.exitCode).toBe(5);
    expect(finished.stdout()).toBe("finished\n");
  });

  it("logs() yields { stream, data } entries", async () => {
    const command = await sandbox.runCommand({
      cmd: "sh",
      args: ["-c", "echo a; sleep 0.05; echo b >&2; sleep 0.05; echo c"],
      detached: true,
    });
    const logs: CommandLog[] = [];
    for await (const log of command.logs()) {
      expect(["stdout", "stderr"]).toContain(log.stream);
      expect(typeof log.data).toBe("string");
      logs.push(log);
    }
    expect(logs).toEqual([
      { stream: "stdout", data: "a\n" },
      { stream: "stderr", data: "b\n" },
      { stream: "stdout", data: "c\n" },
    ]);
  });

  it("kill() without a signal sends SIGTERM", async () => {
    const command = await sandbox.runCommand({
      cmd: "sh",
      args: ["-c", "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done"],
      detached: true,
    });
    for await (const log of command.logs()) if (log.data.includes("ready")) break;
    await command.kill();
    const finished = await command.wait();
    expect(finished.stdout()).toContain("got TERM");
    expect(finished.exitCode).toBe(0);
    await waitFor(
      async () =>
        (await sandbox.listProcesses({ statuses: ["running"] })).every((process) => process.id !== command.id),
      {
        what: "the command to be gone",
      },
    );
  });

  it("the positional form takes detached too, and a detached command's signal kills it", async () => {
    const marker = sleepMarker();
    const controller = new AbortController();
    const command = await sandbox.runCommand("sleep", [marker], { detached: true, signal: controller.signal });
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep" });
    controller.abort();
    const finished = await command.wait();
    expect(finished.signal).toBe("SIGTERM");
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be gone" });
  });

  it("a detached command's signal is let go once its handle is done (detach, reconnect, stop), and starts no following", async () => {
    const calls: string[] = [];
    const own = await connect({
      baseUrl: t.server.url,
      interceptors: [(next) => (request) => (calls.push(request.method.name), next(request))],
    });
    const marker = sleepMarker();
    const controller = new AbortController();
    const listeners = () => getEventListeners(controller.signal, "abort").length;
    try {
      const command = await own.runCommand("sleep", [marker], { detached: true, signal: controller.signal });
      expect(listeners()).toBe(1);
      // reconnect() lets this handle go and hands the signal to the new one.
      const resumed = await command.reconnect();
      expect(listeners()).toBe(1);
      // Nothing followed the command: no StreamLogs call was made.
      expect(calls.filter((name) => name === "StreamLogs")).toEqual([]);
      resumed.detach();
      expect(listeners()).toBe(0);
      // Detached, the signal no longer kills it.
      controller.abort();
      expect(sleepers(marker)).toHaveLength(1);

      const stopped = new AbortController();
      await own.runCommand("sleep", [marker], { detached: true, signal: stopped.signal });
      expect(getEventListeners(stopped.signal, "abort")).toHaveLength(1);
      await own.stop();
      expect(getEventListeners(stopped.signal, "abort")).toHaveLength(0);

      // And the command that exits while followed lets go of its signal at the exit.
      await own.start();
      const exiting = new AbortController();
      const quick = await own.runCommand("true", [], { detached: true, signal: exiting.signal });
      await quick.wait();
      expect(getEventListeners(exiting.signal, "abort")).toHaveLength(0);
    } finally {
      await own.close();
      for (const pid of sleepers(marker)) process.kill(pid, "SIGKILL");
    }
  });

  it("never ignores an argument of the wrong shape or an option spelled as another API spells it", async () => {
    await expect(sandbox.runCommand("echo", "hello" as never)).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    await expect(sandbox.runCommand("sleep", ["5"], { timeout: 100 } as never)).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
    await expect(sandbox.runCommand({ cmd: "true", detach: true } as never)).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
  });
});
