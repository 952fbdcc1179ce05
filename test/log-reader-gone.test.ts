import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { connect } from "../src/client/index.js";
import { type DaemonProcess, startDaemonProcess } from "./support/daemon-process.js";
import { waitFor } from "./support/processes.js";

describe("a daemon whose log reader went away (EPIPE on stderr)", () => {
  let daemon: DaemonProcess | undefined;
  const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-log-gone-"));
  afterEach(() => {
    daemon?.child.kill("SIGKILL");
    rmSync(workspace, { recursive: true, force: true });
  });

  it("keeps serving, and shuts down on SIGTERM as before", async () => {
    daemon = await startDaemonProcess(["--workspace", workspace, "--log-format", "json", "--log-level", "info"]);
    // The reader of its stderr goes away, as a log collector that exits or a `| head` that has had enough.
    daemon.child.stderr!.destroy();
    const sandbox = await connect({ baseUrl: daemon.url });
    try {
      // Each call logs a line, written after the reader left: EPIPE.
      for (let index = 0; index < 3; index++) expect((await sandbox.exec(`echo ${index}`)).stdout).toBe(`${index}\n`);
    } finally {
      await sandbox.close();
    }
    const child = daemon.child;
    child.kill("SIGTERM");
    // Before: its log's flush at exit retried the failed write every 100 ms, for ever.
    await waitFor(() => child.exitCode !== null || child.signalCode !== null, {
      what: "the daemon to exit after SIGTERM",
      timeoutMs: 15_000,
    });
    expect(child.exitCode).toBe(0);
  });
});
