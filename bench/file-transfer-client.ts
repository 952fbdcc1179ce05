/**
 * One file transfer, as a client process of its own makes it: the file service's figures
 * (bench/figures/files.ts) run each transfer here rather than in the bench process, whose heap
 * (results, samplers, other clients) would slow the client down and bill the daemon's rate for it.
 * Bundled with esbuild like the daemon (bench/build.ts).
 *
 * Takes one JSON argument, a {@link Transfer}; prints one JSON line, a {@link TransferResult}: the
 * bytes moved, and the wall time and this process's CPU time from the first byte asked for to the
 * last one confirmed (module loading and connecting excluded).
 */
import { createReadStream } from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import { once } from "node:events";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { FileService } from "../gen/sandbox/v1/files_pb.js";

/** What to move, and how. */
export interface Transfer {
  /**
   * `write-grpc`/`read-grpc` (FileService over gRPC), `write-connect`/`read-connect` (Connect over
   * HTTP/1.1), `put-http1`/`get-http1` (`node:http`), `put-http2`/`get-http2` (`node:http2`, cleartext).
   */
  kind: `${"write" | "read"}-${"grpc" | "connect"}` | `${"put" | "get"}-${"http1" | "http2"}`;
  /** The daemon's URL for the RPCs; the whole URL of the file for PUT and GET. */
  url: string;
  /** The file's path in the workspace, for the RPCs. */
  path?: string;
  /** The local file an upload sends. */
  source?: string;
  /** Its size in bytes (an HTTP/1.1 PUT's content-length). */
  bytes?: number;
}

/** What {@link Transfer} measured. */
export interface TransferResult {
  bytes: number;
  elapsedMs: number;
  cpuMs: number;
}

/** Reads of an upload's source: the size the SDK sends a message in. */
const chunkBytes = 1024 * 1024;

function cpuMs(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
}

async function* writeParts(path: string, source: string) {
  yield { part: { case: "header" as const, value: { path } } };
  for await (const chunk of createReadStream(source, { highWaterMark: chunkBytes }))
    yield { part: { case: "data" as const, value: chunk as Buffer } };
}

async function rpc(files: Client<typeof FileService>, transfer: Transfer): Promise<number> {
  if (transfer.kind.startsWith("write")) {
    const { stat } = await files.write(writeParts(transfer.path!, transfer.source!));
    return Number(stat?.sizeBytes ?? 0);
  }
  let received = 0;
  for await (const response of files.read({ path: transfer.path! }))
    if (response.event.case === "chunk") received += response.event.value.data.length;
  return received;
}

async function http1(transfer: Transfer): Promise<number> {
  if (transfer.kind === "put-http1") {
    const request = http.request(transfer.url, {
      method: "PUT",
      headers: { "content-type": "application/octet-stream", "content-length": String(transfer.bytes) },
    });
    createReadStream(transfer.source!, { highWaterMark: chunkBytes }).pipe(request);
    const [response] = (await once(request, "response")) as [http.IncomingMessage];
    response.resume();
    await once(response, "end");
    if (response.statusCode !== 204 && response.statusCode !== 200) throw new Error(`PUT: ${response.statusCode}`);
    return transfer.bytes!;
  }
  const request = http.get(transfer.url);
  const [response] = (await once(request, "response")) as [http.IncomingMessage];
  if (response.statusCode !== 200) throw new Error(`GET: ${response.statusCode}`);
  let received = 0;
  response.on("data", (chunk: Buffer) => (received += chunk.length));
  await once(response, "end");
  return received;
}

async function overHttp2(session: http2.ClientHttp2Session, transfer: Transfer): Promise<number> {
  const url = new URL(transfer.url);
  const put = transfer.kind === "put-http2";
  const stream = session.request({ ":method": put ? "PUT" : "GET", ":path": url.pathname });
  if (put) createReadStream(transfer.source!, { highWaterMark: chunkBytes }).pipe(stream);
  else stream.end();
  const [headers] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
  let received = 0;
  stream.on("data", (chunk: Buffer) => (received += chunk.length));
  await once(stream, "end");
  const status = Number(headers[":status"]);
  if (status !== 200 && status !== 204) throw new Error(`${put ? "PUT" : "GET"}: ${status}`);
  return put ? transfer.bytes! : received;
}

/** Connects first (outside the measured window), then moves the bytes. */
async function measure(transfer: Transfer): Promise<TransferResult> {
  const protocol = transfer.kind.split("-")[1];
  if (protocol === "grpc" || protocol === "connect") {
    const sessions = protocol === "grpc" ? new Http2SessionManager(transfer.url) : undefined;
    const files = createClient(
      FileService,
      sessions === undefined
        ? createConnectTransport({ baseUrl: transfer.url, httpVersion: "1.1" })
        : createGrpcTransport({ baseUrl: transfer.url, sessionManager: sessions }),
    );
    await sessions?.connect();
    try {
      return await timed(() => rpc(files, transfer));
    } finally {
      sessions?.abort();
    }
  }
  if (protocol === "http2") {
    const session = http2.connect(new URL(transfer.url).origin);
    await once(session, "connect");
    try {
      return await timed(() => overHttp2(session, transfer));
    } finally {
      session.close();
    }
  }
  return timed(() => http1(transfer));
}

async function timed(move: () => Promise<number>): Promise<TransferResult> {
  const cpuStart = cpuMs();
  const start = performance.now();
  const bytes = await move();
  return { bytes, elapsedMs: performance.now() - start, cpuMs: cpuMs() - cpuStart };
}

const result = await measure(JSON.parse(process.argv[2]!) as Transfer);
// Exits once the line is out: an idle keep-alive socket must not hold the process.
process.stdout.write(`${JSON.stringify(result)}\n`, () => process.exit(0));
