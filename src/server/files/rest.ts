import { once } from "node:events";
import type http from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, codeToString } from "@connectrpc/connect/protocol-connect";
import type { Logger } from "pino";
import { FileError, type FileStat, type WorkspaceFiles } from "../../files/index.js";
import { noteBytesMoved, releaseBufferedMemory } from "../../process/index.js";
import { linkSignals, onAbort } from "../../shared/abort.js";
import type { ErrorReasonName } from "../../shared/error-reasons.js";
import { errorInfoOf, toConnectError } from "../rpc/index.js";
import type { FileLimits } from "./limits.js";
import type { FileMetrics } from "./metrics.js";
import { multipartBoundary, multipartFile } from "./multipart.js";

/** A request and its response, HTTP/1.1 or HTTP/2 (the compatibility API). */
type AnyRequest = http.IncomingMessage | import("node:http2").Http2ServerRequest;
type AnyResponse = http.ServerResponse | import("node:http2").Http2ServerResponse;

/** The path prefix of the REST file surface. */
export const filesRestPrefix = "/v1/files";

/** Options for {@link createFilesRest}. */
export interface FilesRestOptions {
  /** The file domain. */
  files: WorkspaceFiles;
  /** Transfer limits, shared with the RPCs. */
  limits: FileLimits;
  /** Bytes and operations, when counted. */
  metrics?: FileMetrics;
  /** Where each request's line goes. Default: nowhere. */
  logger?: Logger;
  /** Aborted when the daemon shuts down: transfers in progress stop. */
  shutdownSignal?: AbortSignal;
}

/**
 * The REST file surface of KEP-539.2 (`packages/sandboxd/spec/filesystem/v1/filesystem.yaml`), mapped
 * onto the same file domain and limits as the FileService RPCs. It does no authentication of its
 * own: mount it behind the gate (token, Host, TLS) as the daemon does.
 */
export interface FilesRest {
  /**
   * Answers a request under `/v1/files` and returns true, or returns false for any other path:
   * - `GET /v1/files/{path}`: a file's bytes (`application/octet-stream`, `Content-Length` for a file
   *   with a size, one `Range: bytes=` range answered 206), or a directory's listing as JSON
   *   (`{ path, entries: [{ name, size, type, modified_at, mode }] }`; symlinks as what they point to
   *   inside the workspace, others left out). `HEAD` answers the same headers without the body.
   * - `PUT /v1/files/{path}?mode=0644`: writes the body atomically, parents created: 204. The body is
   *   the raw bytes, or a `multipart/form-data` form whose part `file` holds them.
   * - `DELETE /v1/files/{path}?recursive=true`: 204; a directory with entries is 409 without
   *   `recursive`; the workspace root is emptied with `recursive`, else 409.
   * The path is percent-decoded as a whole (`%2F` is a slash), relative to the first workspace root
   * or absolute inside a root. Errors are JSON `{ code, message, reason, metadata }`: 400, 403, 404,
   * 409, 429 (a transfer limit), 507 (no space), with `reason` the daemon's ErrorReason name.
   */
  answer(request: AnyRequest, response: AnyResponse): boolean;
}

/** Creates the REST file surface: see {@link FilesRest}. */
export function createFilesRest(options: FilesRestOptions): FilesRest {
  return {
    answer(request, response) {
      const url = request.url ?? "";
      const query = url.indexOf("?");
      const rawPath = query < 0 ? url : url.slice(0, query);
      if (rawPath !== filesRestPrefix && !rawPath.startsWith(`${filesRestPrefix}/`)) return false;
      void serve(
        options,
        request,
        response,
        rawPath.slice(filesRestPrefix.length + 1),
        new URLSearchParams(query < 0 ? "" : url.slice(query + 1)),
      );
      return true;
    },
  };
}

/** What one request did, for its log line and metrics. */
interface Outcome {
  operation: string;
  path: string;
  status: number;
  bytes: number;
  error?: string;
}

async function serve(
  options: FilesRestOptions,
  request: AnyRequest,
  response: AnyResponse,
  encodedPath: string,
  query: URLSearchParams,
): Promise<void> {
  const started = performance.now();
  const outcome: Outcome = { operation: (request.method ?? "").toLowerCase(), path: "", status: 0, bytes: 0 };
  // Ends with the response (finished or the client gone) or with the daemon.
  const closed = new AbortController();
  const onClose = () => closed.abort(new ConnectError("the client went away", Code.Canceled));
  response.once("close", onClose);
  const linked = linkSignals(closed.signal, options.shutdownSignal);
  try {
    let path: string;
    try {
      path = decodeURIComponent(encodedPath);
    } catch {
      throw new FileError("the path is not valid percent-encoding", "INVALID_ARGUMENT", {
        metadata: { field: "path" },
      });
    }
    outcome.path = path === "" ? "." : path;
    switch (request.method) {
      case "GET":
      case "HEAD":
        await serveRead(options, request, response, outcome, linked.signal);
        break;
      case "PUT":
        await serveWrite(options, request, response, outcome, query, linked.signal);
        break;
      case "DELETE":
        await serveDelete(options, response, outcome, query);
        break;
      default:
        outcome.operation = "other";
        response.setHeader("allow", "GET, HEAD, PUT, DELETE");
        throw Object.assign(
          new FileError(`method not allowed: ${request.method}`, "INVALID_ARGUMENT", { metadata: { field: "method" } }),
          { httpStatus: 405 },
        );
    }
  } catch (error) {
    answerError(response, error, outcome);
  } finally {
    linked.dispose();
    response.off("close", onClose);
    // The socket's and the file's buffers of a transfer wait for a collection the small JS heap does not ask for.
    releaseBufferedMemory(outcome.bytes);
    const durationMs = Math.round((performance.now() - started) * 100) / 100;
    const result = outcome.status >= 400 ? String(outcome.status) : "ok";
    options.metrics?.operations.inc({ operation: outcome.operation, surface: "rest", result });
    const line = {
      method: request.method,
      path: outcome.path,
      status: outcome.status,
      bytes: outcome.bytes,
      durationMs,
      peer: `${request.socket?.remoteAddress}:${request.socket?.remotePort}`,
    };
    if (outcome.status >= 500 || outcome.status === 0)
      options.logger?.warn({ ...line, error: outcome.error }, "files request");
    else options.logger?.info(line, "files request");
  }
}

async function serveRead(
  options: FilesRestOptions,
  request: AnyRequest,
  response: AnyResponse,
  outcome: Outcome,
  signal: AbortSignal,
): Promise<void> {
  const { files, limits } = options;
  const head = request.method === "HEAD";
  const release = head ? undefined : limits.acquire("transfer", connectionOf(request));
  try {
    const range = parseRange(request.headers.range);
    let reader;
    try {
      reader = await files.openRead(
        outcome.path,
        range === undefined || range === "unsatisfiable"
          ? {}
          : { offset: range.start, length: range.end - range.start + 1 },
      );
    } catch (error) {
      if (error instanceof FileError && error.reason === "IS_A_DIRECTORY") {
        outcome.operation = head ? "head" : "list";
        return await serveListing(files, response, outcome, head, signal);
      }
      throw error;
    }
    outcome.operation = head ? "head" : "read";
    try {
      const { stat } = reader;
      const headers: Record<string, string> = {
        "content-type": "application/octet-stream",
        "last-modified": new Date(stat.modifiedSeconds * 1000).toUTCString(),
        "cache-control": "no-store",
      };
      let status = 200;
      const sized = reader.plannedBytes !== undefined;
      if (sized) headers["accept-ranges"] = "bytes";
      if (range !== undefined && sized) {
        if (range === "unsatisfiable" || range.start >= stat.sizeBytes) {
          outcome.status = 416;
          response.writeHead(416, { "content-range": `bytes */${stat.sizeBytes}` });
          response.end();
          return;
        }
        status = 206;
        headers["content-range"] = `bytes ${range.start}-${range.start + reader.plannedBytes! - 1}/${stat.sizeBytes}`;
      }
      if (sized) headers["content-length"] = String(reader.plannedBytes);
      else if (!head) headers.trailer = "sandboxd-read-end";
      outcome.status = status;
      response.writeHead(status, headers);
      if (head) {
        response.end();
        return;
      }
      let ending = "eof";
      for await (const event of reader.events(signal)) {
        if (event.kind === "chunk") {
          outcome.bytes += event.data.length;
          noteBytesMoved(event.data.length);
          options.metrics?.bytes.inc({ direction: "read" }, event.data.length);
          if (!(response as http.ServerResponse).write(event.data)) await drained(response, signal);
        } else if (event.kind === "limit") {
          ending = event.limit;
        }
      }
      if (sized && outcome.bytes !== reader.plannedBytes) {
        // The file shrank under the read: the promised length cannot be kept, and a short body must
        // not pass for the whole file.
        outcome.error = "the file shrank while it was read";
        response.destroy();
        return;
      }
      if (!sized) (response as http.ServerResponse).addTrailers({ "sandboxd-read-end": ending });
      response.end();
    } finally {
      await reader.close();
    }
  } finally {
    release?.();
  }
}

/** The JSON listing of a directory, written page by page. */
async function serveListing(
  files: WorkspaceFiles,
  response: AnyResponse,
  outcome: Outcome,
  head: boolean,
  signal: AbortSignal,
): Promise<void> {
  // The first page before the headers: a refusal still gets its status.
  let page = await files.list(outcome.path, { pageSize: 10_000 });
  const display = outcome.path === "." ? "/" : outcome.path.startsWith("/") ? outcome.path : `/${outcome.path}`;
  outcome.status = 200;
  response.writeHead(200, { "content-type": "application/json", "cache-control": "no-store" });
  if (head) {
    response.end();
    return;
  }
  (response as http.ServerResponse).write(`{"path":${JSON.stringify(display)},"entries":[`);
  let first = true;
  for (;;) {
    const rows: string[] = [];
    for (const entry of page.entries) {
      const row = await listingEntry(files, entry);
      if (row !== undefined) rows.push(JSON.stringify(row));
    }
    if (rows.length > 0) {
      const text = (first ? "" : ",") + rows.join(",");
      first = false;
      outcome.bytes += text.length;
      if (!(response as http.ServerResponse).write(text)) await drained(response, signal);
    }
    if (page.continueAfter === undefined) break;
    signal.throwIfAborted();
    page = await files.list(outcome.path, { pageSize: 10_000, after: page.continueAfter });
  }
  response.end("]}");
}

/** One `FileEntry` of the KEP's listing: a symlink as what it points to inside the workspace, else left out. */
async function listingEntry(
  files: WorkspaceFiles,
  entry: FileStat,
): Promise<Record<string, string | number> | undefined> {
  let stat = entry;
  if (entry.kind === "symlink") {
    try {
      stat = await files.stat(entry.path, { followSymlinks: true });
    } catch {
      return undefined; // Broken, or leading out of the workspace.
    }
  }
  return {
    name: entry.name,
    size: stat.sizeBytes,
    type: stat.kind === "directory" ? "directory" : "file",
    modified_at: new Date(stat.modifiedSeconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z"),
    mode: (stat.mode & 0o777).toString(8).padStart(4, "0"),
  };
}

async function serveWrite(
  options: FilesRestOptions,
  request: AnyRequest,
  response: AnyResponse,
  outcome: Outcome,
  query: URLSearchParams,
  signal: AbortSignal,
): Promise<void> {
  outcome.operation = "write";
  const modeText = query.get("mode");
  if (modeText !== null && !/^0[0-7]{3}$/.test(modeText)) {
    throw new FileError(`mode ${JSON.stringify(modeText)} must match ^0[0-7]{3}$`, "INVALID_ARGUMENT", {
      metadata: { field: "mode" },
    });
  }
  // The KEP's two bodies: the raw bytes, or a multipart/form-data form whose part "file" holds them.
  const boundary = multipartBoundary(String(request.headers["content-type"] ?? ""));
  const lengthHeader = boundary === undefined ? request.headers["content-length"] : undefined;
  const release = options.limits.acquire("transfer", connectionOf(request));
  const writer = await options.files
    .createWriter({
      path: outcome.path,
      mode: modeText === null ? 0o644 : Number.parseInt(modeText, 8),
      createParents: true,
      expectedSizeBytes:
        typeof lengthHeader === "string" && /^\d+$/.test(lengthHeader) ? Number(lengthHeader) : undefined,
    })
    .catch((error: unknown) => {
      release();
      throw error;
    });
  try {
    const aborted = onAbort(signal, () => request.destroy());
    try {
      const body = request as AsyncIterable<Buffer>;
      for await (const chunk of boundary === undefined ? body : multipartFile(body, boundary)) {
        await writer.write(chunk);
        noteBytesMoved(chunk.length);
        outcome.bytes += chunk.length;
        options.metrics?.bytes.inc({ direction: "write" }, chunk.length);
      }
    } finally {
      aborted.dispose();
    }
    signal.throwIfAborted();
    // A body cut short ends its iteration like a whole one on HTTP/2 (a reset stream): never commit it.
    if ("stream" in request ? request.aborted : !request.complete)
      throw new ConnectError("the client went away", Code.Canceled);
    await writer.commit(signal);
    outcome.status = 204;
    response.writeHead(204);
    response.end();
  } catch (error) {
    await writer.abort();
    throw error;
  } finally {
    release();
  }
}

async function serveDelete(
  options: FilesRestOptions,
  response: AnyResponse,
  outcome: Outcome,
  query: URLSearchParams,
): Promise<void> {
  outcome.operation = "remove";
  const { files } = options;
  const recursive = parseBool(query.get("recursive"));
  const location = files.locate(outcome.path);
  if (location.relative === "") {
    // The root stays (it may be a mount): with recursive it is emptied, as the KEP's reference does.
    if (!recursive)
      throw new FileError(
        "cannot delete the workspace root; pass recursive=true to clear its contents",
        "WORKSPACE_ROOT",
        { metadata: { path: outcome.path } },
      );
    await files.stat(outcome.path);
    for (
      let page = await files.list(outcome.path, { pageSize: 10_000 });
      ;
      page = await files.list(outcome.path, { pageSize: 10_000 })
    ) {
      for (const entry of page.entries) await files.remove(entry.path, { recursive: true });
      if (page.continueAfter === undefined) break;
    }
  } else {
    await files.remove(outcome.path, { recursive });
  }
  outcome.status = 204;
  response.writeHead(204);
  response.end();
}

/** strconv.ParseBool, as the KEP's reference reads `recursive`; false when absent. */
function parseBool(text: string | null): boolean {
  if (text === null || text === "") return false;
  if (["1", "t", "T", "TRUE", "true", "True"].includes(text)) return true;
  if (["0", "f", "F", "FALSE", "false", "False"].includes(text)) return false;
  throw new FileError(`recursive ${JSON.stringify(text)} must be a boolean`, "INVALID_ARGUMENT", {
    metadata: { field: "recursive" },
  });
}

/** One `bytes=` range of a Range header; undefined without one (or with several, answered whole). */
function parseRange(header: string | undefined): { start: number; end: number } | "unsatisfiable" | undefined {
  if (header === undefined) return undefined;
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (match === null) return undefined;
  const [, from, to] = match;
  if (from === "" && to === "") return undefined;
  // A suffix range (the last n bytes) is answered with the whole file, as a server may.
  if (from === "") return undefined;
  const start = Number(from);
  const end = to === "" ? Number.MAX_SAFE_INTEGER : Number(to);
  if (end < start) return "unsatisfiable";
  return { start, end };
}

/** Waits for a response to take more, or for the signal. */
async function drained(response: AnyResponse, signal: AbortSignal): Promise<void> {
  await once(response as http.ServerResponse, "drain", { signal });
}

function connectionOf(request: AnyRequest): object | undefined {
  if ("stream" in request && request.stream !== undefined) return request.stream.session ?? undefined;
  return request.socket ?? undefined;
}

/** HTTP status of each reason the surface can answer; others by their status code. */
const statusByReason: Partial<Record<ErrorReasonName, number>> = {
  PATH_NOT_FOUND: 404,
  PATH_OUTSIDE_WORKSPACE: 403,
  PATH_NOT_ACCESSIBLE: 403,
  INVALID_ARGUMENT: 400,
  IS_A_DIRECTORY: 400,
  NOT_A_REGULAR_FILE: 400,
  SYMLINK_LOOP: 400,
  CONTENT_MISMATCH: 400,
  NOT_A_DIRECTORY: 409,
  PATH_ALREADY_EXISTS: 409,
  DIRECTORY_NOT_EMPTY: 409,
  WORKSPACE_ROOT: 409,
  CROSS_DEVICE: 409,
  FILE_BUSY: 409,
  READ_ONLY_FILESYSTEM: 409,
  STORAGE_EXHAUSTED: 507,
  LIMIT_EXCEEDED: 429,
  FILE_SERVICE_UNAVAILABLE: 503,
  SHUTTING_DOWN: 503,
};

function answerError(response: AnyResponse, error: unknown, outcome: Outcome): void {
  const connectError = toConnectError(error);
  const info = errorInfoOf(connectError);
  const reason = info?.reason as ErrorReasonName | undefined;
  const status =
    (error as { httpStatus?: number }).httpStatus ??
    (reason !== undefined ? statusByReason[reason] : undefined) ??
    codeToHttpStatus(connectError.code);
  outcome.error = connectError.rawMessage;
  if (response.headersSent) {
    // Too late for a status: the client must not take a cut body for a whole one.
    response.destroy();
    return;
  }
  outcome.status = status;
  const code = status === 409 ? "CONFLICT" : codeToString(connectError.code).toUpperCase();
  const body = JSON.stringify({
    code,
    message: connectError.rawMessage,
    reason: reason ?? "",
    metadata: info?.metadata ?? {},
  });
  response.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) });
  response.end(body);
}
