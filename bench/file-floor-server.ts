/**
 * The floor under the file service's transfer figures: bare `node:http2` (cleartext) and `node:http`
 * servers that take a PUT's body into a file and answer a GET with a file, streamed with
 * `stream.pipeline` and nothing else (no RPC framing, no protobuf, no confinement, no identity, no
 * temporary file). What a transfer through this process costs is what Node's HTTP stacks and its
 * file streams cost before anything of sandboxd's runs (bench/figures/files.ts).
 *
 * Serves files of the directory given as its first argument, by base name. Prints one JSON line on
 * stdout once both listen: `{"http2":"http://127.0.0.1:<port>","http1":"http://127.0.0.1:<port>"}`;
 * runs until killed.
 */
import { createReadStream, createWriteStream } from "node:fs";
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from "node:http2";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { pipeline } from "node:stream/promises";

const directory = process.argv[2];
if (directory === undefined) throw new Error("usage: file-floor-server <directory>");

/** Reads of a GET's file: the size the daemon reads a file in. */
const readChunkBytes = 1024 * 1024;

/** The file a request path names: its base name, inside the served directory. */
function fileOf(requestPath: string): string {
  return path.join(directory!, path.basename(decodeURIComponent(requestPath.split("?")[0]!)));
}

const h2 = http2.createServer();
h2.on("stream", (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
  const file = fileOf(String(headers[":path"]));
  const served =
    headers[":method"] === "PUT"
      ? pipeline(stream, createWriteStream(file)).then(() => {
          stream.respond({ ":status": 204 }, { endStream: true });
        })
      : (stream.respond({ ":status": 200 }),
        pipeline(createReadStream(file, { highWaterMark: readChunkBytes }), stream));
  served.catch(() => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
});

const h1 = http.createServer((request: IncomingMessage, response: ServerResponse) => {
  const file = fileOf(request.url ?? "/");
  const served =
    request.method === "PUT"
      ? pipeline(request, createWriteStream(file)).then(() => {
          response.writeHead(204).end();
        })
      : (response.writeHead(200), pipeline(createReadStream(file, { highWaterMark: readChunkBytes }), response));
  served.catch(() => response.destroy());
});

const listening = (server: http.Server | http2.Http2Server) =>
  new Promise<string>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)),
  );
const [http2Url, http1Url] = await Promise.all([listening(h2), listening(h1)]);
process.stdout.write(`${JSON.stringify({ http2: http2Url, http1: http1Url })}\n`);
