import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { daemonNodeFlags } from "../src/cli/sandboxd/node-flags.js";
import { bundleDaemon, type DaemonBundle } from "./support/daemon-bundle.js";
import { startDaemonProcess, type DaemonProcess } from "./support/daemon-process.js";
import { patternChunks } from "./support/files.js";
import { rssGrowthDuring } from "./support/processes.js";

// What an upload holds in a daemon that has done little else: each piece a socket gives the daemon
// is a buffer outside V8's heap, and V8, collecting for the size of its own small heap, let the
// pieces of one upload pile up by 40-43 MiB before anything collected them (16-18 MiB with the
// daemon's collections during transfers, both cores busy).

const size = 384 * 1024 * 1024;
let workspace: string;
let bundle: DaemonBundle;
let daemon: DaemonProcess;

beforeAll(async () => {
  workspace = mkdtempSync(path.join(os.tmpdir(), "files-memory-"));
  // The daemon as it ships (one bundled file, with its Node flags): tsx's loader would add its own heap.
  bundle = await bundleDaemon();
  daemon = await startDaemonProcess(["--workspace", workspace], {
    file: process.execPath,
    args: [...daemonNodeFlags, bundle.script],
    env: { ...process.env, ...bundle.env },
  });
}, 60_000);

afterAll(async () => {
  daemon?.child.kill("SIGTERM");
  await daemon?.exited();
  bundle?.remove();
  rmSync(workspace, { recursive: true, force: true });
});

/** PUTs `size` bytes of the test pattern to /v1/files/<name> over HTTP/1.1 and expects 204. */
async function put(name: string, size: number): Promise<void> {
  const { hostname, port } = new URL(daemon.url);
  const request = http.request({
    hostname,
    port,
    path: `/v1/files/${name}`,
    method: "PUT",
    headers: { "content-type": "application/octet-stream", "content-length": String(size) },
  });
  const answered = once(request, "response") as Promise<[http.IncomingMessage]>;
  for (const chunk of patternChunks(size)) if (!request.write(chunk)) await once(request, "drain");
  request.end();
  const [response] = await answered;
  response.resume();
  await once(response, "end");
  expect(response.statusCode).toBe(204);
}

describe("an upload into a fresh daemon", () => {
  it("grows its RSS by at most 32 MiB while 384 MiB go through PUT /v1/files", async () => {
    // One small upload first: what the daemon's first request loads and compiles (18-35 MiB in the
    // first 400 ms of a cold upload, varying with the load on the machine) is not the pile-up measured here.
    await put("warm-up.bin", 4 * 1024 * 1024);
    const { growth } = await rssGrowthDuring(daemon.child.pid!, () => put("upload.bin", size), 20);
    expect(growth, `grew by ${(growth / 2 ** 20).toFixed(1)} MiB`).toBeLessThan(32 * 1024 * 1024);
  }, 120_000);
});
