import { rmSync } from "node:fs";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { describe, expect, it } from "vitest";
import { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";
import { startDaemonProcess } from "./support/daemon-process.js";
import { waitFor } from "./support/processes.js";
import { Code, type SandboxClient, sleepMarker, sleepers, streamError } from "./support/rpc.js";
import { createWorkspace, startTestServer } from "./support/server.js";

/**
 * Starts an Exec and resolves once its `started` event came (the handler then runs on: a shutdown meanwhile is
 * met by its running command); `ended` settles with the error the stream ends with.
 */
async function startedExec(client: SandboxClient, spec: { command: string; processId: string }) {
  const iterator = client.exec({ spec })[Symbol.asyncIterator]();
  expect((await iterator.next()).value?.event.case).toBe("started");
  // Wrapped: an async function's caller would otherwise wait for the returned promise itself.
  return { ended: streamError({ [Symbol.asyncIterator]: () => iterator }) };
}

describe("the exit cause at daemon shutdown", () => {
  it("is daemon_shutdown in the records of a background process and of an Exec's, kept by the closed server", async () => {
    const t = await startTestServer();
    const marker = sleepMarker();
    const { process } = await t.client.startProcess({ spec: { command: "sleep", args: [marker] } });
    const { ended } = await startedExec(t.client, { command: `sleep ${marker}`, processId: `exec-${marker}` });
    await waitFor(() => sleepers(marker).length === 2, { what: "both sleeps to run" });
    await t.server.close();
    expect((await ended).code).toBe(Code.Unavailable);
    for (const id of [process!.processId, `exec-${marker}`]) {
      const exit = t.server.manager.get(id).exit;
      expect({ id, cause: exit?.cause, signal: exit?.signal, killed: exit?.killed }).toEqual({
        id,
        cause: "daemon_shutdown",
        signal: "SIGTERM",
        killed: true,
      });
    }
    await t.close();
  });

  it("is daemon_shutdown in the exit log line of each command of a daemon stopped with SIGTERM", async () => {
    const workspace = createWorkspace();
    const daemon = await startDaemonProcess(["--workspace", workspace, "--log-format", "json"]);
    const session = new Http2SessionManager(daemon.url);
    try {
      const client = createClient(
        SandboxService,
        createGrpcTransport({ baseUrl: daemon.url, sessionManager: session }),
      );
      const marker = sleepMarker();
      const { process } = await client.startProcess({ spec: { command: "sleep", args: [marker] } });
      const execId = `exec-${marker}`;
      const { ended } = await startedExec(client, { command: `sleep ${marker}`, processId: execId });
      await waitFor(() => sleepers(marker).length === 2, { what: "both sleeps to run" });
      daemon.child.kill("SIGTERM");
      await daemon.exited();
      expect((await ended).code).toBe(Code.Unavailable);
      const exits = daemon
        .stderr()
        .split("\n")
        .filter((line) => line.startsWith("{"))
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .filter((line) => line.msg === "process exited");
      for (const id of [process!.processId, execId]) {
        expect(exits.find((line) => line.processId === id)).toMatchObject({
          cause: "daemon_shutdown",
          signal: "SIGTERM",
        });
      }
    } finally {
      session.abort();
      daemon.child.kill("SIGKILL");
      rmSync(workspace, { recursive: true, force: true });
    }
  });
});
