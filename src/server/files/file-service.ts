import { createHash } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import type {
  FileService,
  ReadRequest,
  ReadResponseSchema,
  WatchRequest,
  WatchResponseSchema,
  WriteRequest,
} from "../../../gen/sandbox/v1/files_pb.js";
import {
  maxEntriesPageSize,
  type FileReader,
  type FileWatch,
  type FileWriter,
  type WorkspaceFiles,
} from "../../files/index.js";
import { noteBytesMoved, releaseBufferedMemory } from "../../process/index.js";
import { onAbort } from "../../shared/abort.js";
import {
  callDetailsKey,
  clientGoneKey,
  connectionKey,
  sandboxError,
  throwIfShuttingDown,
  toConnectError,
} from "../rpc/index.js";
import { toProtoFileInfo, toProtoReadEvent, toProtoWatchEvent } from "./convert.js";
import type { FileLimits } from "./limits.js";
import type { FileMetrics } from "./metrics.js";

/** Dependencies of {@link createFileService}. */
export interface FileServiceOptions {
  /** The file domain. */
  files: WorkspaceFiles;
  /** Transfer and watch limits, shared with the REST surface. */
  limits: FileLimits;
  /** Bytes and operations, when counted. */
  metrics?: FileMetrics;
}

/**
 * Creates the implementation of sandbox.v1.FileService on the file domain: requests are validated
 * and resolved before a stream's first event, failures become ConnectErrors with their ErrorInfo,
 * and each call adds its path (and bytes) to its log line.
 */
export function createFileService(options: FileServiceOptions): ServiceImpl<typeof FileService> {
  const { files, limits, metrics } = options;
  const tokens = new ListTokens();
  /** Runs a unary operation: its path in the log line, its outcome counted, its failure a ConnectError. */
  const unary = async <T>(
    operation: string,
    context: HandlerContext,
    path: string,
    run: () => Promise<T>,
  ): Promise<T> => {
    note(context, { path });
    try {
      const result = await run();
      metrics?.operations.inc({ operation, surface: "rpc", result: "ok" });
      return result;
    } catch (error) {
      throw counted(operation, toConnectError(error));
    }
  };
  const counted = (operation: string, error: ConnectError) => {
    metrics?.operations.inc({ operation, surface: "rpc", result: codeToString(error.code) });
    return error;
  };

  return {
    async *read(request: ReadRequest, context: HandlerContext) {
      note(context, { path: request.path });
      const signal = context.values.get(clientGoneKey) ?? context.signal;
      let release: (() => void) | undefined;
      let sent = 0;
      // A call cancelled while parked on a `yield` may never run its `finally`: its slot and its file
      // are let go from the signal itself.
      let reader: FileReader | undefined;
      const freeing = onAbort(context.signal, () => {
        release?.();
        void reader?.close();
      });
      try {
        release = limits.acquire("transfer", context.values.get(connectionKey));
        reader = await files.openRead(request.path, {
          offset: Number(request.offset),
          length: request.length === undefined ? undefined : Number(request.length),
        });
        try {
          context.signal.throwIfAborted();
          yield { event: { case: "stat", value: toProtoFileInfo(reader.stat) } } satisfies ReadEvent;
          for await (const event of reader.events(context.signal)) {
            if (event.kind === "chunk") {
              sent += event.data.length;
              noteBytesMoved(event.data.length);
              metrics?.bytes.inc({ direction: "read" }, event.data.length);
            }
            yield toProtoReadEvent(event) satisfies ReadEvent;
          }
        } finally {
          await reader.close();
        }
        throwIfShuttingDown(context.signal);
        metrics?.operations.inc({ operation: "read", surface: "rpc", result: "ok" });
      } catch (error) {
        throwIfShuttingDown(context.signal);
        if (signal.aborted) throw counted("read", new ConnectError("the call was cancelled", Code.Canceled));
        throw counted("read", toConnectError(error));
      } finally {
        freeing.dispose();
        release?.();
        note(context, { bytes: sent });
        releaseBufferedMemory(sent);
      }
    },

    async write(requests: AsyncIterable<WriteRequest>, context: HandlerContext) {
      // A client that cancels may end its messages first and reset the stream right after: the reset
      // is seen at once on this signal (the context's comes a turn later), up to the rename.
      const gone = context.values.get(clientGoneKey) ?? context.signal;
      let release: (() => void) | undefined;
      let writer: FileWriter | undefined;
      try {
        const iterator = requests[Symbol.asyncIterator]();
        const first = await iterator.next();
        if (first.done || first.value.part.case !== "header") {
          throw sandboxError("INVALID_ARGUMENT", "the first message of a write must be its header", {
            metadata: { field: "header" },
          });
        }
        const header = first.value.part.value;
        note(context, { path: header.path });
        release = limits.acquire("transfer", context.values.get(connectionKey));
        writer = await files.createWriter({
          path: header.path,
          mode: header.mode,
          createParents: header.createParents,
          failIfExists: header.failIfExists,
          expectedSizeBytes: header.expectedSizeBytes === undefined ? undefined : Number(header.expectedSizeBytes),
          expectedSha256: header.expectedSha256,
        });
        for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
          const part = next.value.part;
          if (part.case === "header")
            throw sandboxError("INVALID_ARGUMENT", "a write has one header, its first message", {
              metadata: { field: "header" },
            });
          if (part.case === "data") {
            await writer.write(part.value);
            noteBytesMoved(part.value.length);
            metrics?.bytes.inc({ direction: "write" }, part.value.length);
          }
        }
        // A client that went away mid-upload ends the stream early: its bytes are not put in place.
        throwIfShuttingDown(context.signal);
        if (gone.aborted || context.signal.aborted) throw new ConnectError("the call was cancelled", Code.Canceled);
        const stat = await writer.commit(gone);
        metrics?.operations.inc({ operation: "write", surface: "rpc", result: "ok" });
        return { stat: toProtoFileInfo(stat) };
      } catch (error) {
        await writer?.abort();
        throwIfShuttingDown(context.signal);
        if (gone.aborted) throw counted("write", new ConnectError("the call was cancelled", Code.Canceled));
        throw counted("write", toConnectError(error));
      } finally {
        release?.();
        if (writer !== undefined) {
          note(context, { bytes: writer.bytesWritten });
          // The buffers of its messages wait for a collection the small JS heap does not ask for.
          releaseBufferedMemory(writer.bytesWritten);
        }
      }
    },

    stat: (request, context) =>
      unary("stat", context, request.path, async () => ({
        stat: toProtoFileInfo(await files.stat(request.path, { followSymlinks: request.followSymlinks })),
      })),

    list: (request, context) =>
      unary("list", context, request.path, async () => {
        const depth = request.depth === 0 ? 1 : request.depth;
        const after = tokens.read(request.pageToken, request.path, depth);
        const pageSize = request.pageSize === 0 ? undefined : Math.min(request.pageSize, maxEntriesPageSize);
        const page = await files.list(request.path, { depth, pageSize, after });
        return {
          entries: page.entries.map(toProtoFileInfo),
          nextPageToken: page.continueAfter === undefined ? "" : tokens.issue(page.continueAfter, request.path, depth),
        };
      }),

    makeDir: (request, context) =>
      unary("make_dir", context, request.path, async () => {
        const { stat, created } = await files.makeDirectory(request.path, {
          parents: request.parents,
          mode: request.mode,
        });
        return { stat: toProtoFileInfo(stat), created };
      }),

    remove: (request, context) =>
      unary("remove", context, request.path, async () => {
        await files.remove(request.path, { recursive: request.recursive });
        return {};
      }),

    move: (request, context) =>
      unary("move", context, request.source, async () => {
        note(context, { destination: request.destination });
        return {
          stat: toProtoFileInfo(
            await files.move(request.source, request.destination, { overwrite: request.overwrite }),
          ),
        };
      }),

    chmod: (request, context) =>
      unary("chmod", context, request.path, async () => ({
        stat: toProtoFileInfo(await files.chmod(request.path, request.mode)),
      })),

    async *watch(request: WatchRequest, context: HandlerContext) {
      note(context, { path: request.path });
      let release: (() => void) | undefined;
      // As for Read: a watch cancelled while parked on a `yield` is stopped from the signal itself.
      let watch: FileWatch | undefined;
      const freeing = onAbort(context.signal, () => {
        release?.();
        void watch?.close();
      });
      try {
        release = limits.acquire("watch", context.values.get(connectionKey));
        watch = await files.watch(request.path, { recursive: request.recursive });
        if (context.signal.aborted) await watch.close();
        for await (const event of watch.events(context.signal)) yield toProtoWatchEvent(event) satisfies WatchEvent;
        throwIfShuttingDown(context.signal);
        metrics?.operations.inc({ operation: "watch", surface: "rpc", result: "ok" });
      } catch (error) {
        throwIfShuttingDown(context.signal);
        throw counted("watch", toConnectError(error));
      } finally {
        freeing.dispose();
        release?.();
      }
    },
  };
}

type ReadEvent = MessageInitShape<typeof ReadResponseSchema>;
type WatchEvent = MessageInitShape<typeof WatchResponseSchema>;

/** Adds facts to the call's log line. */
function note(context: HandlerContext, details: Record<string, string | number>): void {
  const line = context.values.get(callDetailsKey);
  if (line !== undefined) Object.assign(line, details);
}

/**
 * The opaque `page_token` of List: the entry a page ended with (relative to the listed directory),
 * bound to the request's path and depth. Paths outlive the daemon, so tokens do too.
 */
class ListTokens {
  issue(after: string, path: string, depth: number): string {
    return Buffer.from(JSON.stringify({ after, scope: scope(path, depth) })).toString("base64url");
  }

  read(token: string, path: string, depth: number): string | undefined {
    if (token === "") return undefined;
    const invalid = (why: string) =>
      sandboxError("INVALID_ARGUMENT", `invalid page_token: ${why}`, { metadata: { field: "page_token" } });
    let parsed: { after?: unknown; scope?: unknown };
    try {
      parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) ?? {};
    } catch {
      throw invalid("not a token this daemon issued");
    }
    if (typeof parsed.after !== "string" || parsed.after === "" || typeof parsed.scope !== "string")
      throw invalid("not a token this daemon issued");
    if (parsed.scope !== scope(path, depth))
      throw invalid("it was issued for another path or depth: ask for the first page again");
    return parsed.after;
  }
}

function scope(path: string, depth: number): string {
  return createHash("sha256")
    .update(JSON.stringify([path, depth]))
    .digest("base64url")
    .slice(0, 16);
}
