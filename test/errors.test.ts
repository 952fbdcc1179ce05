import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { SendInputRequestSchema } from "../gen/sandbox/v1/sandbox_pb.js";
import { processesWithMarker, waitFor } from "./support/processes.js";
import { Code, collectExec, ProcessStatus, rpcError, sleepMarker, streamError, waitForExit } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});
// Every refusal is an answer, not a crash: the server must keep serving after each one.
afterEach(async () => {
  const result = await collectExec(t.client, { command: "echo still-serving" });
  expect({
    stdout: result.stdout.toString(),
    stderr: result.stderr.toString(),
    status: result.exited.status,
    error: result.exited.error,
  }).toEqual({
    stdout: "still-serving\n",
    stderr: "",
    status: ProcessStatus.COMPLETED,
    error: "",
  });
});

/** A SendInput request stream from a list of messages. */
async function* inputs(
  ...messages: MessageInitShape<typeof SendInputRequestSchema>[]
): AsyncGenerator<MessageInitShape<typeof SendInputRequestSchema>> {
  for (const message of messages) yield message;
}

/** Runs SendInput with the given messages; returns the acks, or throws the call's error. */
async function sendInput(...messages: MessageInitShape<typeof SendInputRequestSchema>[]): Promise<bigint[]> {
  const acks: bigint[] = [];
  for await (const ack of t.client.sendInput(inputs(...messages))) acks.push(ack.bytesWritten);
  return acks;
}

/** Checks a refusal's code and that its message is lowercase and informative. */
function expectRefusal(error: Awaited<ReturnType<typeof rpcError>>, code: Code, messagePart: string | RegExp): void {
  expect(Code[error.code]).toBe(Code[code]);
  expect(error.rawMessage).toMatch(messagePart);
  expect(error.rawMessage[0]).toBe(error.rawMessage[0].toLowerCase());
  expect(error.rawMessage).not.toMatch(/internal error|unexpected failure/);
}

describe("NOT_FOUND for an unknown process", () => {
  const processId = "no-such-process";
  it("GetProcess", async () => {
    expectRefusal(await rpcError(t.client.getProcess({ processId })), Code.NotFound, `process not found: ${processId}`);
  });
  it("KillProcess", async () => {
    expectRefusal(await rpcError(t.client.killProcess({ processId })), Code.NotFound, "process not found");
  });
  it("GetProcessLogs", async () => {
    expectRefusal(await rpcError(t.client.getProcessLogs({ processId })), Code.NotFound, "process not found");
  });
  it("StreamLogs", async () => {
    expectRefusal(
      await streamError(t.client.streamLogs({ processId, follow: true })),
      Code.NotFound,
      "process not found",
    );
  });
  it("SendInput", async () => {
    expectRefusal(
      await rpcError(sendInput({ input: { case: "open", value: { processId } } })),
      Code.NotFound,
      "process not found",
    );
  });
});

describe("ALREADY_EXISTS for a duplicate live process id", () => {
  it("refuses a second StartProcess and an Exec with the id of a live process, and allows it again after exit", async () => {
    const marker = sleepMarker();
    const processId = "duplicate-id";
    const first = await t.client.startProcess({
      spec: { command: "sleep", args: [marker], processId, autoCleanup: false },
    });
    expect(first.process?.status).toBe(ProcessStatus.RUNNING);

    const again = await rpcError(t.client.startProcess({ spec: { command: "echo second", processId } }));
    expectRefusal(again, Code.AlreadyExists, `process already exists: ${processId}`);
    const viaExec = await streamError(t.client.exec({ spec: { command: "echo second", processId } }));
    expectRefusal(viaExec, Code.AlreadyExists, "process already exists");
    // The refused calls did not disturb the original.
    expect((await t.client.getProcess({ processId })).process?.status).toBe(ProcessStatus.RUNNING);
    expect(processesWithMarker(marker)).toHaveLength(1);

    await t.client.killProcess({ processId, signal: "SIGKILL" });
    await waitForExit(t.client, processId);
    const reused = await collectExec(t.client, { command: "echo reused", processId });
    expect(reused.stdout.toString()).toBe("reused\n");
    expect(reused.exited.status).toBe(ProcessStatus.COMPLETED);
  });
});

describe("INVALID_ARGUMENT for a bad request", () => {
  it("an empty or blank command", async () => {
    expectRefusal(
      await streamError(t.client.exec({ spec: { command: "" } })),
      Code.InvalidArgument,
      "command is empty",
    );
    expectRefusal(
      await rpcError(t.client.startProcess({ spec: { command: "   " } })),
      Code.InvalidArgument,
      "command is empty",
    );
  });
  it("a missing spec", async () => {
    expectRefusal(await streamError(t.client.exec({})), Code.InvalidArgument, "spec is required");
    expectRefusal(await rpcError(t.client.startProcess({})), Code.InvalidArgument, "spec is required");
  });
  it("a negative timeout", async () => {
    const error = await streamError(t.client.exec({ spec: { command: "true", timeoutMs: -1 } }));
    expectRefusal(error, Code.InvalidArgument, "timeout must be a non-negative");
  });
  it("a bad signal name in KillProcess, KillAllProcesses and SendInput", async () => {
    const marker = sleepMarker();
    const { process } = await t.client.startProcess({ spec: { command: "sleep", args: [marker], stdin: true } });
    const processId = process!.processId;
    try {
      expectRefusal(
        await rpcError(t.client.killProcess({ processId, signal: "SIGNOPE" })),
        Code.InvalidArgument,
        "unknown signal",
      );
      expectRefusal(
        await rpcError(t.client.killProcess({ processId, signal: "999" })),
        Code.InvalidArgument,
        "unknown signal",
      );
      expectRefusal(
        await rpcError(t.client.killAllProcesses({ signal: "bogus" })),
        Code.InvalidArgument,
        "unknown signal",
      );
      const viaInput = await rpcError(
        sendInput(
          { input: { case: "open", value: { processId } } },
          { input: { case: "signal", value: "NOTASIGNAL" } },
        ),
      );
      expectRefusal(viaInput, Code.InvalidArgument, "unknown signal");
      // None of the refused signals reached the process.
      expect((await t.client.getProcess({ processId })).process?.status).toBe(ProcessStatus.RUNNING);
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
    await waitFor(() => processesWithMarker(marker).length === 0, { what: "the sleep to go" });
  });
  it("an empty process id, a first SendInput message that is not open, and a bad resize", async () => {
    expectRefusal(
      await rpcError(t.client.getProcess({ processId: "" })),
      Code.InvalidArgument,
      "process_id is required",
    );
    expectRefusal(
      await rpcError(sendInput({ input: { case: "data", value: new Uint8Array([1]) } })),
      Code.InvalidArgument,
      "must be open",
    );
    const { process } = await t.client.startProcess({ spec: { command: "cat", pty: { cols: 80, rows: 24 } } });
    const processId = process!.processId;
    try {
      const error = await rpcError(
        sendInput(
          { input: { case: "open", value: { processId } } },
          { input: { case: "resize", value: { cols: 0, rows: 10 } } },
        ),
      );
      expectRefusal(error, Code.InvalidArgument, "resize");
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });
});

describe("FAILED_PRECONDITION for input that cannot be delivered", () => {
  it("SendInput to a process started without stdin", async () => {
    const marker = sleepMarker();
    const { process } = await t.client.startProcess({ spec: { command: "sleep", args: [marker] } });
    const processId = process!.processId;
    expect(process?.stdin).toBe(false);
    try {
      const error = await rpcError(
        sendInput(
          { input: { case: "open", value: { processId } } },
          { input: { case: "data", value: new Uint8Array([104, 105]) } },
        ),
      );
      expectRefusal(error, Code.FailedPrecondition, "has no stdin");
    } finally {
      await t.client.killProcess({ processId, signal: "SIGKILL" });
    }
  });
  it("SendInput to a process that has exited", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "true", stdin: true, autoCleanup: false } });
    const processId = process!.processId;
    await waitForExit(t.client, processId);
    const error = await rpcError(sendInput({ input: { case: "open", value: { processId } } }));
    expectRefusal(error, Code.FailedPrecondition, "process has exited");
  });
  it("data after end-of-input", async () => {
    const { process } = await t.client.startProcess({ spec: { command: "cat", stdin: true } });
    const processId = process!.processId;
    const error = await rpcError(
      sendInput(
        { input: { case: "open", value: { processId } } },
        { input: { case: "close", value: {} } },
        { input: { case: "data", value: new Uint8Array([1]) } },
      ),
    );
    expect(Code[error.code]).toBe(Code[Code.FailedPrecondition]);
    await waitForExit(t.client, processId);
  });
});

describe("OUT_OF_RANGE for offsets beyond what was written", () => {
  it("StreamLogs from a stdout or stderr offset past the end", async () => {
    const done = await collectExec(t.client, { command: "printf 12345; printf ab >&2", autoCleanup: false });
    const processId = done.started.processId;
    const stdoutError = await streamError(t.client.streamLogs({ processId, stdoutOffset: 6n }));
    expectRefusal(stdoutError, Code.OutOfRange, "stdout_offset 6 is beyond the 5 bytes written");
    const stderrError = await streamError(t.client.streamLogs({ processId, stderrOffset: 3n }));
    expectRefusal(stderrError, Code.OutOfRange, "stderr_offset 3 is beyond the 2 bytes written");
    // Exactly at the end is fine: nothing more, then the exit.
    const atEnd = [];
    for await (const response of t.client.streamLogs({ processId, stdoutOffset: 5n, stderrOffset: 2n }))
      atEnd.push(response.event.case);
    expect(atEnd).toEqual(["process", "exited"]);
  });
});

describe("a missing program, a missing directory and a forbidden directory are told apart", () => {
  it("a missing program (argv form) is status ERROR with exit 127 and says program not found", async () => {
    const result = await collectExec(t.client, { command: "no-such-program-sandboxd", args: ["x"] });
    expect(result.exited.status).toBe(ProcessStatus.ERROR);
    expect(result.exited.exitCode).toBe(127);
    expect(result.exited.error).toBe("program not found: no-such-program-sandboxd");
    const started = await t.client.startProcess({ spec: { command: "./missing.sh", args: ["x"] } });
    expect(started.process?.status).toBe(ProcessStatus.ERROR);
    expect(started.process?.exit?.exitCode).toBe(127);
    expect(started.process?.exit?.error).toMatch(/program not found/);
  });
  it("a missing program through the shell is the shell's exit 127, reported as data", async () => {
    const result = await collectExec(t.client, { command: "no-such-program-sandboxd" });
    expect(result.exited.status).toBe(ProcessStatus.FAILED);
    expect(result.exited.exitCode).toBe(127);
    expect(result.stderr.toString()).toMatch(/no-such-program-sandboxd: .*not found/);
  });
  it("a file that is not executable is exit 126", async () => {
    writeFileSync(path.join(t.workspace, "not-executable.sh"), "echo never\n", { mode: 0o644 });
    const result = await collectExec(t.client, { command: "./not-executable.sh", args: ["x"] });
    expect(result.exited.status).toBe(ProcessStatus.ERROR);
    expect(result.exited.exitCode).toBe(126);
    expect(result.exited.error).toMatch(/permission denied/);
  });
  it("a missing working directory is FAILED_PRECONDITION", async () => {
    const error = await streamError(t.client.exec({ spec: { command: "true", cwd: "does/not/exist" } }));
    expectRefusal(error, Code.FailedPrecondition, "working directory not found: does/not/exist");
    writeFileSync(path.join(t.workspace, "plain-file"), "");
    const notDirectory = await streamError(t.client.exec({ spec: { command: "true", cwd: "plain-file" } }));
    expectRefusal(notDirectory, Code.FailedPrecondition, "working directory is not a directory: plain-file");
  });
  it("a working directory outside the workspace is PERMISSION_DENIED: absolute, .. and a symlink pointing out", async () => {
    mkdirSync(path.join(t.workspace, "inside"), { recursive: true });
    symlinkSync("/tmp", path.join(t.workspace, "escape"));
    symlinkSync(path.join(t.workspace, "inside"), path.join(t.workspace, "inside-link"));
    for (const cwd of ["/etc", "..", "inside/../..", "../does-not-exist", "escape", "escape/"]) {
      const error = await streamError(t.client.exec({ spec: { command: "true", cwd } }));
      // The refusal names the roots the cwd may be in.
      expectRefusal(
        error,
        Code.PermissionDenied,
        `working directory is outside the workspace roots: ${cwd} (allowed: ${t.workspace})`,
      );
    }
    const startError = await rpcError(t.client.startProcess({ spec: { command: "true", cwd: "escape" } }));
    expect(Code[startError.code]).toBe(Code[Code.PermissionDenied]);
    // A symlink that stays inside is fine, and the resolved directory is reported.
    const result = await collectExec(t.client, { command: "pwd", cwd: "inside-link" });
    expect(result.stdout.toString()).toBe(`${path.join(t.workspace, "inside")}\n`);
    expect(result.started.cwd).toBe(path.join(t.workspace, "inside"));
  });
});

describe("a non-zero exit is data, not an error", () => {
  it("reports the exit code and status failed", async () => {
    const result = await collectExec(t.client, { command: "echo partial; exit 42" });
    expect(result.exited.status).toBe(ProcessStatus.FAILED);
    expect(result.exited.exitCode).toBe(42);
    expect(result.exited.signal).toBe("");
    expect(result.stdout.toString()).toBe("partial\n");
  });
  it("reports the signal that ended a process, without an exit code", async () => {
    const result = await collectExec(t.client, { command: "kill -USR1 $$" });
    expect(result.exited.status).toBe(ProcessStatus.KILLED);
    expect(result.exited.exitCode).toBeUndefined();
    expect(result.exited.signal).toBe("SIGUSR1");
    expect(result.exited.killed).toBe(false);
  });
});

describe("sudo and limits", () => {
  it("refuses sudo with PERMISSION_DENIED unless allowed", async () => {
    const error = await streamError(t.client.exec({ spec: { command: "id -u", sudo: true } }));
    expectRefusal(error, Code.PermissionDenied, "sudo is not allowed");
  });
  it("refuses a process beyond the live-process limit with RESOURCE_EXHAUSTED", async () => {
    const limited = await startTestServer({ maxProcesses: 2 });
    try {
      const marker = sleepMarker();
      for (let i = 0; i < 2; i++) await limited.client.startProcess({ spec: { command: "sleep", args: [marker] } });
      const error = await rpcError(limited.client.startProcess({ spec: { command: "sleep", args: [marker] } }));
      expectRefusal(error, Code.ResourceExhausted, "too many processes");
      expect(processesWithMarker(marker)).toHaveLength(2);
      // Once one exits there is room again.
      const { killedCount } = await limited.client.killAllProcesses({ signal: "SIGKILL" });
      expect(killedCount).toBe(2);
      await waitFor(
        async () => (await limited.client.listProcesses({ statuses: [ProcessStatus.RUNNING] })).processes.length === 0,
      );
      const ok = await limited.client.startProcess({ spec: { command: "true" } });
      expect(ok.process?.status).not.toBe(ProcessStatus.ERROR);
    } finally {
      await limited.close();
    }
  });
});
