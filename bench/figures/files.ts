import { spawn } from "node:child_process";
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { once } from "node:events";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { FileService } from "../../gen/sandbox/v1/files_pb.js";
import { spawnAndRead } from "../baseline.js";
import { buildFileTransferTools } from "../build.js";
import { type Daemon, readCpuMs } from "../daemon.js";
import type { Transfer, TransferResult } from "../file-transfer-client.js";
import { ratioRow, type Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { megabytesPerSecond, percentile, timeMs } from "../stats.js";
import { execTrue } from "../exec-true.js";

/** Block size of the source file's writes. */
const chunkBytes = 1024 * 1024;

/**
 * The file service's figures, each beside a baseline of the same run: `size.fileBytes` up and down
 * through gRPC, Connect over HTTP/1.1 and the REST paths, each beside a local `cp` of the same file to
 * the same disk made just before it (the daemon's and the client's CPU for the transfer in its note,
 * the client a process of its own), and the same transfers through bare `node:http2` and `node:http`
 * servers (bench/file-floor-server.ts: what Node costs with nothing of ours); a 4 KiB write and read
 * beside one exec of `true`; a listing of 10,000 entries beside `ls -l` of them; and the most the
 * daemon's RSS grew during any transfer (<= 32 MiB).
 */
export async function measureFiles(daemon: Daemon, size: BenchSize): Promise<Row[]> {
  const sessions = new Http2SessionManager(daemon.url);
  const grpc = createClient(FileService, createGrpcTransport({ baseUrl: daemon.url, sessionManager: sessions }));
  const scratch = mkdtempSync(path.join(tmpdir(), "sandboxd-bench-files-"));
  try {
    const tools = await buildFileTransferTools();
    const bytes = size.fileBytes;
    const source = path.join(scratch, "source.bin");
    writePattern(source, bytes);
    const rows: Row[] = [];
    // Warm up first (code loaded and compiled, pools at their working size), as test/files-large.test.ts
    // does: the growth measured is each transfer's own.
    // Through the transfer client the figures use, each surface once.
    const warmUp = path.join(daemon.workspace, "warm-up.bin");
    writePattern(warmUp, 32 * 2 ** 20);
    for (const transfer of [
      { kind: "read-grpc", url: daemon.url, path: "warm-up.bin" },
      { kind: "write-grpc", url: daemon.url, path: "warm-up-copy.bin", source: warmUp },
      { kind: "read-connect", url: daemon.url, path: "warm-up.bin" },
      { kind: "write-connect", url: daemon.url, path: "warm-up-copy.bin", source: warmUp },
      { kind: "put-http1", url: `${daemon.url}/v1/files/warm-up-copy.bin`, source: warmUp, bytes: 32 * 2 ** 20 },
      { kind: "get-http1", url: `${daemon.url}/v1/files/warm-up-copy.bin` },
    ] satisfies Transfer[])
      await transferInProcess(tools.transferClient, transfer);
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
    // Each transfer's client is a process of its own (bench/file-transfer-client.ts), timed inside it
    // from the first byte asked for to the last confirmed; the daemon's CPU and RSS are sampled here
    // around it.
    const sampled = async (what: string, transfer: Transfer) => {
      const start = daemon.rssBytes();
      const cpuStart = daemon.cpuMs();
      let peak = start;
      const sampler = setInterval(() => (peak = Math.max(peak, daemon.rssBytes())), 50);
      let result: TransferResult;
      try {
        result = await transferInProcess(tools.transferClient, transfer);
      } finally {
        clearInterval(sampler);
      }
      const growth = (Math.max(peak, daemon.rssBytes()) - start) / 2 ** 20;
      mostGrowth = Math.max(mostGrowth, growth);
      if (result.bytes !== bytes) throw new Error(`${what}: moved ${result.bytes} of ${bytes} bytes`);
      return {
        ...result,
        mbps: megabytesPerSecond(bytes, result.elapsedMs),
        daemonCpuMs: daemon.cpuMs() - cpuStart,
        growthMib: growth,
      };
    };
    // The floor: the same transfers through bare node:http2 and node:http servers (their own process,
    // writing to the same disk), each beside a cp made just before it, as ours are.
    const floor = await startFileFloor(tools.floorServer, daemon.workspace);
    const floorRates = new Map<string, number>();
    try {
      for (const protocol of ["http2", "http1"] as const) {
        const url = `${protocol === "http2" ? floor.http2 : floor.http1}/floor-${protocol}.bin`;
        const up: Transfer = { kind: `put-${protocol}`, url, source, bytes };
        const down: Transfer = { kind: `get-${protocol}`, url };
        for (const transfer of [up, down]) {
          const baseline = await cpMbps();
          const cpuStart = floor.cpuMs();
          const result = await transferInProcess(tools.transferClient, transfer);
          if (result.bytes !== bytes) throw new Error(`floor ${transfer.kind}: moved ${result.bytes} of ${bytes}`);
          const mbps = megabytesPerSecond(bytes, result.elapsedMs);
          floorRates.set(transfer.kind, mbps);
          const verb = transfer === up ? "upload (PUT)" : "download (GET)";
          rows.push({
            id: `files-floor-${transfer.kind}`,
            figure: `${formatBytes(bytes)} ${verb} through bare node:${protocol}, no sandboxd (floor)`,
            unit: "MB/s",
            value: mbps,
            baseline,
            ratio: mbps / baseline,
            goal: "-",
            verdict: "info",
            note: `baseline: cp just before; server CPU ${((floor.cpuMs() - cpuStart) / 1000).toFixed(2)} s, client CPU ${(result.cpuMs / 1000).toFixed(2)} s`,
          });
        }
        rmSync(path.join(daemon.workspace, `floor-${protocol}.bin`), { force: true });
      }
    } finally {
      floor.stop();
    }
    const transfers: [string, string, Transfer, string, string?][] = [
      [
        "files-upload-grpc",
        "upload through Write, gRPC",
        { kind: "write-grpc", url: daemon.url, path: "up-grpc.bin", source },
        "put-http2",
      ],
      [
        "files-upload-http1",
        "upload through Write, Connect/HTTP1.1",
        { kind: "write-connect", url: daemon.url, path: "up-http1.bin", source },
        "put-http1",
      ],
      [
        "files-upload-rest",
        "upload through PUT /v1/files, HTTP/1.1",
        { kind: "put-http1", url: `${daemon.url}/v1/files/up-rest.bin`, source, bytes },
        "put-http1",
      ],
      [
        "files-download-grpc",
        "download through Read, gRPC",
        { kind: "read-grpc", url: daemon.url, path: "up-grpc.bin" },
        "get-http2",
        "up-grpc.bin",
      ],
      [
        "files-download-http1",
        "download through Read, Connect/HTTP1.1",
        { kind: "read-connect", url: daemon.url, path: "up-http1.bin" },
        "get-http1",
        "up-http1.bin",
      ],
      [
        "files-download-rest",
        "download through GET /v1/files, HTTP/1.1",
        { kind: "get-http1", url: `${daemon.url}/v1/files/up-rest.bin` },
        "get-http1",
        "up-rest.bin",
      ],
    ];
    for (const [id, figure, transfer, floorKind, done] of transfers) {
      const baseline = await cpMbps();
      const { mbps, cpuMs, daemonCpuMs, growthMib } = await sampled(figure, transfer);
      if (done !== undefined) rmSync(path.join(daemon.workspace, done), { force: true });
      const floorMbps = floorRates.get(floorKind)!;
      rows.push(
        ratioRow(
          {
            id,
            figure: `${formatBytes(bytes)} ${figure}`,
            unit: "MB/s",
            value: mbps,
            baseline,
            note:
              `baseline: cp of the same file to the same disk just before; daemon CPU ${(daemonCpuMs / 1000).toFixed(2)} s, ` +
              `client CPU ${(cpuMs / 1000).toFixed(2)} s, daemon RSS +${growthMib.toFixed(1)} MiB; bare node:${floorKind.split("-")[1]} ${floorKind.startsWith("put") ? "PUT" : "GET"} ` +
              `in this run ${floorMbps.toFixed(0)} MB/s (ours ${(mbps / floorMbps).toFixed(2)}x of it)`,
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

/** The bare servers of bench/file-floor-server.ts, running until stopped. */
interface FileFloor {
  readonly http2: string;
  readonly http1: string;
  /** CPU time the floor server has used, in milliseconds. */
  cpuMs(): number;
  stop(): void;
}

async function startFileFloor(entry: string, directory: string): Promise<FileFloor> {
  const server = spawn(process.execPath, [entry, directory], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    const [line] = (await Promise.race([
      once(server.stdout!, "data"),
      once(server, "exit").then(() => Promise.reject(new Error("the file floor server exited"))),
    ])) as [Buffer];
    const urls = JSON.parse(line.toString()) as { http2: string; http1: string };
    return { ...urls, cpuMs: () => readCpuMs(server.pid!), stop: () => server.kill("SIGKILL") };
  } catch (error) {
    server.kill("SIGKILL");
    throw error;
  }
}

/** Runs `transfer` in a client process of its own (bench/file-transfer-client.ts) and resolves with what it measured. */
async function transferInProcess(entry: string, transfer: Transfer): Promise<TransferResult> {
  const child = spawn(process.execPath, [entry, JSON.stringify(transfer)], { stdio: ["ignore", "pipe", "inherit"] });
  let output = "";
  child.stdout!.on("data", (data: Buffer) => (output += data));
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`${transfer.kind} client exited with ${code}`);
  return JSON.parse(output) as TransferResult;
}

/** The header then the bytes of a Write. */
async function* parts(name: string, data: Uint8Array) {
  yield { part: { case: "header" as const, value: { path: name } } };
  yield { part: { case: "data" as const, value: data } };
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
