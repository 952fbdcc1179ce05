import { mkdtempSync, rmSync } from "node:fs";
import v8 from "node:v8";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileService } from "../gen/sandbox/v1/files_pb.js";
import { loadNativeAddon } from "../src/process/native/native.js";
import { startDaemonProcess, type DaemonProcess } from "./support/daemon-process.js";
import { holdsFor, waitFor } from "./support/processes.js";
import { collectExec, createUncompressedClient } from "./support/rpc.js";

const workspace = mkdtempSync(path.join(tmpdir(), "sandboxd-memory-reclaim-"));
let daemon: DaemonProcess;
let connection: ReturnType<typeof createUncompressedClient>;

beforeAll(async () => {
  daemon = await startDaemonProcess(["--workspace", workspace]);
  connection = createUncompressedClient(daemon.url);
});

afterAll(async () => {
  connection?.close();
  daemon?.child.kill("SIGTERM");
  await daemon?.exited();
  rmSync(workspace, { recursive: true, force: true });
});

/** The daemon's count of memory reclaims, from its /metrics (loopback, no token). */
/** Waits until the daemon has run `count` memory reclaims in all. */
async function reclaimed(count: number, what: string): Promise<void> {
  await waitFor(async () => (await reclaims()) === count, { timeoutMs: 10_000, intervalMs: 100, what });
}

async function reclaims(): Promise<number> {
  const metrics = await (await fetch(`${daemon.url}/metrics`)).text();
  const match = /^sandboxd_memory_reclaims_total (\d+)$/m.exec(metrics);
  if (match === null) throw new Error("no sandboxd_memory_reclaims_total in /metrics");
  return Number(match[1]);
}

async function execs(count: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next++ < count) expect((await collectExec(connection.client, { command: "true" })).exited.exitCode).toBe(0);
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
}

describe("giving memory back after a burst of commands", () => {
  it("collects once after starting, once when it goes quiet after 100 process starts, and not again while it stays quiet", async () => {
    // What starting the daemon left behind, given back once it serves.
    await reclaimed(1, "the reclaim after the start");
    await holdsFor(async () => (await reclaims()) === 1, { forMs: 1500, intervalMs: 100, what: "one reclaim" });
    await execs(120);
    await waitFor(async () => (await reclaims()) === 2, {
      timeoutMs: 10_000,
      intervalMs: 200,
      what: "a memory reclaim after the burst",
    });
    await holdsFor(async () => (await reclaims()) === 2, { forMs: 2500, intervalMs: 100, what: "two reclaims" });
  });

  it("the addon reaches Node's low-memory collection, which gives the young generation back", () => {
    const native = loadNativeAddon();
    expect(native, "the addon is built by npm ci").not.toBeNull();
    const newSpace = () => v8.getHeapSpaceStatistics().find((space) => space.space_name === "new_space")!.space_size;
    // Survivors of young collections grow the young generation; the low-memory collection shrinks it again.
    const kept: object[][] = [];
    for (let round = 0; round < 200; round++) kept.push(Array.from({ length: 2000 }, (_, index) => ({ index, round })));
    const grown = newSpace();
    kept.length = 0;
    expect(native!.lowMemory()).toBe(true);
    expect(newSpace()).toBeLessThan(grown);
  });

  it("does not collect for fewer than 100 starts since the last collection", async () => {
    const before = await reclaims();
    await execs(40);
    await holdsFor(async () => (await reclaims()) === before, { forMs: 2500, intervalMs: 100, what: "no new reclaim" });
  });
});

describe("giving memory back after a file transfer", () => {
  it("collects once a transfer of 16 MiB or more has ended: PUT, GET, Write and Read", async () => {
    const body = Buffer.alloc(24 * 1024 * 1024, 7);
    for (const transfer of ["PUT", "GET"] as const) {
      const before = await reclaims();
      const response = await fetch(`${daemon.url}/v1/files/transfer.bin`, {
        method: transfer,
        ...(transfer === "PUT" ? { body } : {}),
      });
      if (transfer === "GET") expect((await response.arrayBuffer()).byteLength).toBe(body.length);
      expect(response.status).toBe(transfer === "PUT" ? 204 : 200);
      await reclaimed(before + 1, `a memory reclaim after the ${transfer}`);
    }
    const sessions = new Http2SessionManager(daemon.url);
    const files = createClient(FileService, createGrpcTransport({ baseUrl: daemon.url, sessionManager: sessions }));
    try {
      const before = await reclaims();
      await files.write(
        (async function* () {
          yield { part: { case: "header" as const, value: { path: "rpc.bin" } } };
          for (let sent = 0; sent < body.length; sent += 1024 * 1024)
            yield { part: { case: "data" as const, value: body.subarray(sent, sent + 1024 * 1024) } };
        })(),
      );
      await reclaimed(before + 1, "a memory reclaim after Write");
      let read = 0;
      for await (const response of files.read({ path: "rpc.bin" }))
        if (response.event.case === "chunk") read += response.event.value.data.length;
      expect(read).toBe(body.length);
      await reclaimed(before + 2, "a memory reclaim after Read");
    } finally {
      sessions.abort();
    }
  });
});
