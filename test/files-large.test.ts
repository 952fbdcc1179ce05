import { createHash } from "node:crypto";
import { createReadStream, mkdtempSync, rmSync } from "node:fs";
import { once } from "node:events";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileService } from "../gen/sandbox/v1/files_pb.js";
import { startDaemonProcess, type DaemonProcess } from "./support/daemon-process.js";
import { type FilesClient, patternChunks, patternSha256, writeParts } from "./support/files.js";
import { rssGrowthDuring } from "./support/processes.js";

// 1 GiB up and 1 GiB down through each surface (gRPC, Connect over HTTP/1.1, the REST paths over
// HTTP/1.1), sha256-exact, against a daemon process of its own whose resident memory is sampled
// all along: streamed, never buffered.

const size = 1024 * 1024 * 1024;
/**
 * Most the daemon's RSS may grow over its level before the transfer. The daemon gives a transfer's
 * memory back once it ends, so each transfer here starts from about the idle level (63-70 MB), not
 * from what the one before left (which kept 40-50 MiB more): it grows by what it holds at once,
 * 29-62 MiB measured for the RPCs (protobuf-es and connect-es buffers of each 1 MiB message, in
 * glibc's arenas) and 0-20 MiB for the REST paths. Buffering the file would take 1 GiB.
 */
const maxGrowthBytes = 80 * 1024 * 1024;

let workspace: string;
let daemon: DaemonProcess;
let expected: string;

beforeAll(async () => {
  workspace = mkdtempSync(path.join(os.tmpdir(), "files-large-"));
  daemon = await startDaemonProcess(["--workspace", workspace]);
  expected = patternSha256(size);
  // Warm up first (code loaded and compiled, pools and windows at their working size): the growth
  // measured below is the transfer's own.
  const warmUp = Buffer.alloc(32 * 1024 * 1024, 1);
  for (const client of [
    createClient(FileService, createGrpcTransport({ baseUrl: daemon.url })),
    createClient(FileService, createConnectTransport({ baseUrl: daemon.url, httpVersion: "1.1" })),
  ]) {
    await client.write(
      writeParts({ path: "warm-up.bin", expectedSha256: createHash("sha256").update(warmUp).digest("hex") }, warmUp),
    );
    await rpcDownload(client, "warm-up.bin");
  }
  await fetch(`${daemon.url}/v1/files/warm-up.bin`, { method: "PUT", body: warmUp });
  await (await fetch(`${daemon.url}/v1/files/warm-up.bin`)).arrayBuffer();
}, 300_000);

afterAll(async () => {
  daemon?.child.kill("SIGTERM");
  await daemon?.exited();
  rmSync(workspace, { recursive: true, force: true });
});

/** Runs `transfer` while sampling the daemon's RSS; resolves with its result and the growth over the start. */
function sampled<T>(transfer: () => Promise<T>): Promise<{ result: T; growth: number }> {
  return rssGrowthDuring(daemon.child.pid!, transfer);
}

async function fileSha256(file: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file, { highWaterMark: 1024 * 1024 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

async function* pattern(): AsyncGenerator<Uint8Array> {
  yield* patternChunks(size);
}

async function rpcUpload(client: FilesClient, name: string) {
  return (
    await client.write(writeParts({ path: name, expectedSizeBytes: BigInt(size), expectedSha256: expected }, pattern()))
  ).stat!;
}

async function rpcDownload(client: FilesClient, name: string): Promise<{ sha256: string; bytes: number }> {
  const hash = createHash("sha256");
  let bytes = 0;
  for await (const response of client.read({ path: name })) {
    if (response.event.case !== "chunk") continue;
    hash.update(response.event.value.data);
    bytes += response.event.value.data.length;
  }
  return { sha256: hash.digest("hex"), bytes };
}

describe.each([
  { name: "gRPC (HTTP/2)", client: () => createClient(FileService, createGrpcTransport({ baseUrl: daemon.url })) },
  {
    name: "Connect over HTTP/1.1",
    client: () => createClient(FileService, createConnectTransport({ baseUrl: daemon.url, httpVersion: "1.1" })),
  },
])("1 GiB through the RPCs over $name", ({ name, client }) => {
  const file = `${name.startsWith("g") ? "grpc" : "connect"}.bin`;

  it("up: the file on disk is the upload's bytes, sha256-exact", async () => {
    const { result: stat, growth } = await sampled(() => rpcUpload(client(), file));
    expect(stat.sizeBytes).toBe(BigInt(size));
    expect(await fileSha256(path.join(workspace, file))).toBe(expected);
    expect(growth).toBeLessThan(maxGrowthBytes);
  }, 300_000);

  it("down: the bytes read are the file's, sha256-exact", async () => {
    const { result, growth } = await sampled(() => rpcDownload(client(), file));
    expect(result).toEqual({ sha256: expected, bytes: size });
    expect(growth).toBeLessThan(maxGrowthBytes);
    rmSync(path.join(workspace, file));
  }, 300_000);
});

describe("1 GiB through the REST paths over HTTP/1.1", () => {
  const url = `${"/v1/files/"}rest.bin`;

  it("up: PUT of the raw bytes", async () => {
    const { result: status, growth } = await sampled(
      () =>
        new Promise<number>((resolve, reject) => {
          const { hostname, port } = new URL(daemon.url);
          const request = http.request(
            {
              hostname,
              port,
              path: url,
              method: "PUT",
              headers: { "content-type": "application/octet-stream", "content-length": String(size) },
            },
            (response) => {
              response.resume();
              resolve(response.statusCode!);
            },
          );
          request.on("error", reject);
          void (async () => {
            for (const chunk of patternChunks(size)) if (!request.write(chunk)) await once(request, "drain");
            request.end();
          })();
        }),
    );
    expect(status).toBe(204);
    expect(await fileSha256(path.join(workspace, "rest.bin"))).toBe(expected);
    expect(growth).toBeLessThan(maxGrowthBytes);
  }, 300_000);

  it("down: GET with Content-Length", async () => {
    const { result, growth } = await sampled(
      () =>
        new Promise<{ status: number; length: string | undefined; sha256: string }>((resolve, reject) => {
          http
            .get(`${daemon.url}${url}`, (response) => {
              const hash = createHash("sha256");
              response.on("data", (chunk: Buffer) => hash.update(chunk));
              response.on("end", () =>
                resolve({
                  status: response.statusCode!,
                  length: response.headers["content-length"],
                  sha256: hash.digest("hex"),
                }),
              );
              response.on("error", reject);
            })
            .on("error", reject);
        }),
    );
    expect(result).toEqual({ status: 200, length: String(size), sha256: expected });
    expect(growth).toBeLessThan(maxGrowthBytes);
  }, 300_000);
});
