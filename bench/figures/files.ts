import { spawn } from "node:child_process";
import {
  closeSync,
  createReadStream,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { once } from "node:events";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { FileService } from "../../gen/sandbox/v1/files_pb.js";
import { spawnAndRead } from "../baseline.js";
import type { Daemon } from "../daemon.js";
import { ratioRow, type Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { megabytesPerSecond, percentile, timeMs } from "../stats.js";
import { execTrue } from "./exec-latency.js";

type Files = Client<typeof FileService>;

/** Chunk size of uploads and of the source file's reads. */
const chunkBytes = 1024 * 1024;

/**
 * The file service's figures of issue 22, each beside a baseline of the same run: `size.fileBytes`
 * up and down through gRPC, Connect over HTTP/1.1 and the REST paths, each beside a local `cp` of the
 * same file to the same disk made just before it (the daemon's CPU for the transfer in its note); a 4 KiB write and read beside one exec of `true`; a listing of 10,000 entries beside
 * `ls -l` of them; and the most the daemon's RSS grew during any transfer (<= 32 MiB).
 */
export async function measureFiles(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const sessions = new Http2SessionManager(daemon.url);
  const grpc = createClient(FileService, createGrpcTransport({ baseUrl: daemon.url, sessionManager: sessions }));
  const http1 = createClient(FileService, createConnectTransport({ baseUrl: daemon.url, httpVersion: "1.1" }));
  const scratch = mkdtempSync(path.join(tmpdir(), "sandboxd-bench-files-"));
  try {
    const bytes = size.fileBytes;
    const source = path.join(scratch, "source.bin");
    writePattern(source, bytes);
    const rows: Row[] = [];
    // Warm up first (code loaded and compiled, pools at their working size), as test/files-large.test.ts
    // does: the growth measured is each transfer's own.
    writePattern(path.join(daemon.workspace, "warm-up.bin"), 32 * 2 ** 20);
    for (const client of [grpc, http1]) {
      await download(client, "warm-up.bin");
      await upload(client, path.join(daemon.workspace, "warm-up.bin"), "warm-up-copy.bin");
    }
    await restPut(daemon.url, path.join(daemon.workspace, "warm-up.bin"), "warm-up-copy.bin", 32 * 2 ** 20);
    await restGet(daemon.url, "warm-up-copy.bin");
    // The baseline of each transfer is a cp of the same file to the same disk just before it: how
    // fast a disk takes 1 GiB depends on the dirty pages it already holds (on this shared machine a
    // cp of 1 GiB took 1.6 s with few and 5-11 s at the kernel's dirty limit), so each transfer is
    // set beside a copy made in the same state. The copy is removed at once (its dirty pages go
    // with it, unwritten), and so is each upload after its download.
    const copy = path.join(daemon.workspace, "cp-baseline.bin");
    const cpMbps = async () => {
      const elapsed = await timeMs(() => run("cp", [source, copy]));
      rmSync(copy);
      return megabytesPerSecond(bytes, elapsed);
    };
    // The copies start warm: the source is in the page cache, as the daemon's reads of it will be.
    await cpMbps();
    let mostGrowth = 0;
    const sampled = async (what: string, transfer: () => Promise<number>) => {
      const start = daemon.rssBytes();
      const cpuStart = daemon.cpuMs();
      let peak = start;
      const sampler = setInterval(() => (peak = Math.max(peak, daemon.rssBytes())), 50);
      let moved = 0;
      const elapsedMs = await timeMs(async () => (moved = await transfer()));
      clearInterval(sampler);
      const growth = (Math.max(peak, daemon.rssBytes()) - start) / 2 ** 20;
      mostGrowth = Math.max(mostGrowth, growth);
      if (moved !== bytes) throw new Error(`${what}: moved ${moved} of ${bytes} bytes`);
      return { mbps: megabytesPerSecond(bytes, elapsedMs), cpuMs: daemon.cpuMs() - cpuStart };
    };
    const transfers: [string, string, () => Promise<number>, string?][] = [
      ["files-upload-grpc", "upload through Write, gRPC", () => upload(grpc, source, "up-grpc.bin")],
      ["files-upload-http1", "upload through Write, Connect/HTTP1.1", () => upload(http1, source, "up-http1.bin")],
      [
        "files-upload-rest",
        "upload through PUT /v1/files, HTTP/1.1",
        () => restPut(daemon.url, source, "up-rest.bin", bytes),
      ],
      ["files-download-grpc", "download through Read, gRPC", () => download(grpc, "up-grpc.bin"), "up-grpc.bin"],
      [
        "files-download-http1",
        "download through Read, Connect/HTTP1.1",
        () => download(http1, "up-http1.bin"),
        "up-http1.bin",
      ],
      [
        "files-download-rest",
        "download through GET /v1/files, HTTP/1.1",
        () => restGet(daemon.url, "up-rest.bin"),
        "up-rest.bin",
      ],
    ];
    for (const [id, figure, transfer, done] of transfers) {
      const baseline = await cpMbps();
      const { mbps, cpuMs } = await sampled(figure, transfer);
      if (done !== undefined) rmSync(path.join(daemon.workspace, done), { force: true });
      rows.push(
        ratioRow(
          {
            id,
            figure: `${formatBytes(bytes)} ${figure}`,
            unit: "MB/s",
            value: mbps,
            baseline,
            note: `baseline: cp of the same file to the same disk just before; daemon CPU ${(cpuMs / 1000).toFixed(2)} s`,
          },
          "min",
          0.5,
        ),
      );
    }
    rows.push({
      id: "files-rss-growth",
      figure: "daemon RSS growth, most of any transfer above",
      unit: "MB",
      value: mostGrowth * 1.048576,
      baseline: null,
      ratio: null,
      goal: "<= 32 MiB",
      verdict: mostGrowth <= 32 ? "pass" : "fail",
      note: `${mostGrowth.toFixed(1)} MiB over the RSS at each transfer's start, after a 32 MiB warm-up through each surface`,
    });

    // A small file written and read back, beside exec("true"), alternating rounds.
    const small = Buffer.alloc(4096, 7);
    const writeRead = async () => {
      await grpc.write(parts("small.bin", small));
      let read = 0;
      for await (const response of grpc.read({ path: "small.bin" }))
        if (response.event.case === "chunk") read += response.event.value.data.length;
      if (read !== small.length) throw new Error(`read ${read} of ${small.length} bytes`);
    };
    for (let index = 0; index < Math.min(20, size.sequentialCalls); index++) {
      await writeRead();
      await execTrue(daemon.client);
    }
    const small4k: number[] = [];
    const exec: number[] = [];
    const rounds = 5;
    for (let round = 0; round < rounds; round++) {
      for (let index = 0; index < Math.ceil(size.sequentialCalls / rounds); index++)
        small4k.push(await timeMs(writeRead));
      for (let index = 0; index < Math.ceil(size.sequentialCalls / rounds); index++)
        exec.push(await timeMs(() => execTrue(daemon.client)));
    }
    rows.push(
      ratioRow(
        {
          id: "files-small-p50",
          figure: "write + read of a 4 KiB file p50 (baseline: exec true)",
          unit: "ms",
          value: percentile(small4k, 0.5),
          baseline: percentile(exec, 0.5),
          note: `${small4k.length} each, gRPC`,
        },
        "max",
        1.5,
      ),
    );

    // A directory of 10,000 entries listed in one page, beside `ls -l` of it.
    const listed = path.join(daemon.workspace, "ten-thousand");
    mkdirSync(listed);
    for (let index = 0; index < 10_000; index++) writeFileSync(path.join(listed, `entry-${index}`), "");
    const list = async () => {
      const page = await grpc.list({ path: "ten-thousand", pageSize: 10_000 });
      if (page.entries.length !== 10_000) throw new Error(`listed ${page.entries.length} entries`);
    };
    await list();
    await spawnAndRead("ls", ["-l", listed]);
    const listMs: number[] = [];
    const lsMs: number[] = [];
    for (let round = 0; round < 7; round++) {
      listMs.push(await timeMs(list));
      lsMs.push(await timeMs(() => spawnAndRead("ls", ["-l", listed])));
    }
    rows.push(
      ratioRow(
        {
          id: "files-list-10k",
          figure: "list of a 10,000-entry directory (baseline: ls -l)",
          unit: "ms",
          value: percentile(listMs, 0.5),
          baseline: percentile(lsMs, 0.5),
          note: "median of 7, one page of 10,000",
        },
        "max",
        2,
      ),
    );
    rmSync(listed, { recursive: true, force: true });
    return rows;
  } finally {
    sessions.abort();
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The header then the bytes of a Write. */
async function* parts(name: string, data: Uint8Array | AsyncIterable<Uint8Array>) {
  yield { part: { case: "header" as const, value: { path: name } } };
  if (data instanceof Uint8Array) yield { part: { case: "data" as const, value: data } };
  else for await (const chunk of data) yield { part: { case: "data" as const, value: chunk } };
}

async function upload(files: Files, source: string, name: string): Promise<number> {
  const stat = await files.write(parts(name, createReadStream(source, { highWaterMark: chunkBytes })));
  return Number(stat.stat?.sizeBytes ?? 0);
}

async function download(files: Files, name: string): Promise<number> {
  let received = 0;
  for await (const response of files.read({ path: name }))
    if (response.event.case === "chunk") received += response.event.value.data.length;
  return received;
}

function restPut(baseUrl: string, source: string, name: string, bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${baseUrl}/v1/files/${name}`,
      { method: "PUT", headers: { "content-type": "application/octet-stream", "content-length": String(bytes) } },
      (response) => {
        response.resume();
        response.once("end", () =>
          response.statusCode === 204 ? resolve(bytes) : reject(new Error(`PUT answered ${response.statusCode}`)),
        );
      },
    );
    request.once("error", reject);
    createReadStream(source, { highWaterMark: chunkBytes }).pipe(request);
  });
}

function restGet(baseUrl: string, name: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(`${baseUrl}/v1/files/${name}`, (response) => {
        let received = 0;
        response.on("data", (chunk: Buffer) => (received += chunk.length));
        response.once("end", () => resolve(received));
        response.once("error", reject);
      })
      .once("error", reject);
  });
}

/** Writes `bytes` of varied content (not zeros: no filesystem may shortcut them). */
function writePattern(file: string, bytes: number): void {
  const block = Buffer.alloc(chunkBytes);
  for (let index = 0; index < block.length; index += 4) block.writeUInt32LE((index * 2654435761) >>> 0, index);
  const fd = openSync(file, "w");
  try {
    for (let written = 0; written < bytes; written += chunkBytes) {
      block.writeUInt32LE(written / chunkBytes, 0);
      writeSync(fd, block, 0, Math.min(chunkBytes, bytes - written));
    }
  } finally {
    closeSync(fd);
  }
}

async function run(file: string, args: readonly string[]): Promise<void> {
  const child = spawn(file, args, { stdio: "ignore" });
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`${file} exited with ${code}`);
}

function formatBytes(bytes: number): string {
  return bytes >= 2 ** 30 ? `${bytes / 2 ** 30} GiB` : `${bytes / 2 ** 20} MiB`;
}
