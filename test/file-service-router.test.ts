import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileChangeType, FileService, FileType, type WatchResponse } from "../gen/sandbox/v1/files_pb.js";
import { expectReason } from "./support/errors.js";
import { type FilesClient, readFile, writeFile } from "./support/files.js";
import { waitFor } from "./support/processes.js";
import { Code, rpcError, streamError } from "./support/rpc.js";
import { startInMemoryService, type InMemoryService } from "./support/server.js";

// The service tier of sandbox.v1.FileService: the daemon's routes through createRouterTransport (no
// network, no HTTP) on the real file domain and a real workspace. Transfers over the wire, large files,
// the REST surface and the user switch are tested against real servers.
let s: InMemoryService<typeof FileService>;
let files: FilesClient;
beforeAll(async () => {
  s = await startInMemoryService({ service: FileService });
  files = s.client;
});
afterAll(async () => {
  await s.close();
});

describe("FileService through the router", () => {
  it("Write answers the new file's stat; Read gives the stat, the bytes and an end at EOF; Stat agrees", async () => {
    const data = Buffer.from("hello, router\n");
    const written = await writeFile(files, "notes/hello.txt", data, { createParents: true, mode: 0o640 });
    expect(written).toMatchObject({ path: path.join(s.workspace, "notes/hello.txt"), name: "hello.txt" });
    expect(written).toMatchObject({ type: FileType.FILE, sizeBytes: BigInt(data.length), mode: 0o640 });
    expect(readFileSync(path.join(s.workspace, "notes/hello.txt"))).toEqual(data);

    const { events, data: read } = await readFile(files, "notes/hello.txt");
    expect(read).toEqual(data);
    expect(events[0].case).toBe("stat");
    const end = events.at(-1);
    expect(end?.case === "end" && end.value).toMatchObject({ bytesRead: BigInt(data.length), eof: true });
    // A range: from an offset, for a length, and the end says it stopped before EOF.
    const range = await readFile(files, "notes/hello.txt", { offset: 7n, length: 6n });
    expect(range.data.toString()).toBe("router");
    const rangeEnd = range.events.at(-1);
    expect(rangeEnd?.case === "end" && rangeEnd.value).toMatchObject({ bytesRead: 6n, endOffset: 13n, eof: false });

    const { stat } = await files.stat({ path: "notes/hello.txt" });
    expect(stat).toMatchObject({ sizeBytes: written.sizeBytes, mode: 0o640, type: FileType.FILE });
  });

  it("a Write whose content is not what its header says, or that must not replace, leaves the old file as it was", async () => {
    writeFileSync(path.join(s.workspace, "kept.txt"), "old contents");
    const wrong = "0".repeat(64);
    expectReason(await rpcError(writeFile(files, "kept.txt", "new", { expectedSha256: wrong })), {
      code: Code.DataLoss,
      reason: "CONTENT_MISMATCH",
      metadata: {
        path: "kept.txt",
        field: "expected_sha256",
        expected: wrong,
        actual: createHash("sha256").update("new").digest("hex"),
      },
    });
    expectReason(await rpcError(writeFile(files, "kept.txt", "new", { failIfExists: true })), {
      code: Code.AlreadyExists,
      reason: "PATH_ALREADY_EXISTS",
      metadata: { path: "kept.txt" },
    });
    expect(readFileSync(path.join(s.workspace, "kept.txt"), "utf8")).toBe("old contents");
  });

  it("List pages through a directory in name order, and refuses a page token it did not give", async () => {
    mkdirSync(path.join(s.workspace, "many"));
    const names = ["a", "b", "c", "d", "e"].map((letter) => `${letter}.txt`);
    for (const name of names) writeFileSync(path.join(s.workspace, "many", name), name);
    const seen: string[] = [];
    let pageToken = "";
    let pages = 0;
    do {
      const page = await files.list({ path: "many", pageSize: 2, pageToken });
      expect(page.entries.length).toBeLessThanOrEqual(2);
      seen.push(...page.entries.map((entry) => entry.name));
      pageToken = page.nextPageToken;
      pages++;
    } while (pageToken !== "" && pages < 10);
    expect(seen).toEqual(names);
    expect(pages).toBe(3);
    const refused = await rpcError(files.list({ path: "many", pageToken: "not-a-token" }));
    expect(Code[refused.code]).toBe("InvalidArgument");
  });

  it("refuses paths out of the workspace, naming the path, and a non-empty directory removed without recursive", async () => {
    for (const escape of ["../outside", "/etc/passwd", "many/../../outside"]) {
      expectReason(await rpcError(files.stat({ path: escape })), {
        code: Code.PermissionDenied,
        reason: "PATH_OUTSIDE_WORKSPACE",
        metadata: { path: escape },
      });
    }
    expectReason(await streamError(files.read({ path: "missing.txt" })), {
      code: Code.NotFound,
      reason: "PATH_NOT_FOUND",
      metadata: { path: "missing.txt" },
    });
    mkdirSync(path.join(s.workspace, "full"));
    writeFileSync(path.join(s.workspace, "full", "x"), "x");
    expectReason(await rpcError(files.remove({ path: "full" })), {
      code: Code.FailedPrecondition,
      reason: "DIRECTORY_NOT_EMPTY",
      metadata: { path: "full" },
    });
    await files.remove({ path: "full", recursive: true });
    expectReason(await rpcError(files.stat({ path: "full" })), {
      code: Code.NotFound,
      reason: "PATH_NOT_FOUND",
      metadata: { path: "full" },
    });
  });

  it("Watch starts, then tells of a file created and written in the watched directory", async () => {
    mkdirSync(path.join(s.workspace, "watched"));
    const controller = new AbortController();
    const events: WatchResponse["event"][] = [];
    const watching = (async () => {
      try {
        for await (const response of files.watch({ path: "watched" }, { signal: controller.signal }))
          events.push(response.event);
      } catch (error) {
        if (!controller.signal.aborted) throw error;
      }
    })();
    try {
      await waitFor(() => events[0]?.case === "started", { what: "the watch to start" });
      writeFileSync(path.join(s.workspace, "watched", "new.txt"), "created");
      const file = path.join(s.workspace, "watched", "new.txt");
      await waitFor(
        () =>
          events.some(
            (event) =>
              event.case === "change" && event.value.type === FileChangeType.CREATE && event.value.path === file,
          ),
        { what: "the create event" },
      );
    } finally {
      controller.abort();
      await watching;
    }
  });
});
