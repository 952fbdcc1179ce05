import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  mkdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
  existsSync,
  readdirSync,
} from "node:fs";
import http from "node:http";
import path from "node:path";
import { PassThrough } from "node:stream";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  FileChangeType,
  FileService,
  FileType,
  ReadLimit,
  WatchOverflowSource,
  type WatchResponse,
} from "../gen/sandbox/v1/files_pb.js";
import { createLogger } from "../src/server/index.js";
import { type FilesClient, readFile, writeFile, writeParts } from "./support/files.js";
import { waitFor } from "./support/processes.js";
import { startTestServer, type TestServer } from "./support/server.js";

// The file service against a real daemon on a real port: its RPCs over gRPC and over Connect on
// HTTP/1.1, the KEP's REST surface, watches, and a reader that reads slowly.

let t: TestServer;
let grpc: FilesClient;
let connect: FilesClient;
const logLines: Record<string, unknown>[] = [];

beforeAll(async () => {
  const destination = new PassThrough();
  destination.on("data", (line: Buffer) => {
    for (const text of line.toString().split("\n")) if (text.trim() !== "") logLines.push(JSON.parse(text));
  });
  t = await startTestServer({
    logger: createLogger({ format: "json", destination }),
    listener: { requestTimeoutMs: 1000 },
  });
  grpc = t.connect(FileService);
  connect = createClient(FileService, createConnectTransport({ baseUrl: t.server.url, httpVersion: "1.1" }));
});
afterAll(() => t?.close());

describe.each([
  { name: "gRPC", client: () => grpc },
  { name: "Connect over HTTP/1.1", client: () => connect },
])("the RPCs over $name", ({ name, client }) => {
  const dir = name.startsWith("g") ? "over-grpc" : "over-connect";

  it("writes, reads (whole and a range), stats, lists, moves, chmods and removes", async () => {
    const files = client();
    const written = await writeFile(files, `${dir}/a/b.txt`, "hello, files", { createParents: true, mode: 0o640 });
    expect(written).toMatchObject({
      path: path.join(t.workspace, dir, "a/b.txt"),
      name: "b.txt",
      type: FileType.FILE,
      sizeBytes: 12n,
      mode: 0o640,
    });
    expect(readFileSync(path.join(t.workspace, dir, "a/b.txt"), "utf8")).toBe("hello, files");
    const whole = await readFile(files, `${dir}/a/b.txt`);
    expect(whole.data.toString()).toBe("hello, files");
    expect(whole.events[0].case).toBe("stat");
    expect(whole.events.at(-1)).toEqual({
      case: "end",
      value: expect.objectContaining({ bytesRead: 12n, endOffset: 12n, eof: true }),
    });
    const range = await readFile(files, `${dir}/a/b.txt`, { offset: 7n, length: 3n });
    expect(range.data.toString()).toBe("fil");
    expect(range.events.map((event) => event.case)).toEqual(["stat", "chunk", "limitReached", "end"]);
    expect(range.events[2].value).toMatchObject({ limit: ReadLimit.LENGTH, limitBytes: 3n });
    await files.makeDir({ path: `${dir}/a/c/d`, parents: true });
    symlinkSync("b.txt", path.join(t.workspace, dir, "a", "link"));
    const listed = await files.list({ path: dir, depth: 3 });
    expect(listed.entries.map((entry) => entry.path.slice(t.workspace.length))).toEqual([
      `/${dir}/a`,
      `/${dir}/a/b.txt`,
      `/${dir}/a/c`,
      `/${dir}/a/c/d`,
      `/${dir}/a/link`,
    ]);
    expect(listed.entries[4]).toMatchObject({ type: FileType.SYMLINK, symlinkTarget: "b.txt" });
    expect(listed.nextPageToken).toBe("");
    expect((await files.stat({ path: `${dir}/a/link`, followSymlinks: true })).stat).toMatchObject({
      type: FileType.FILE,
      sizeBytes: 12n,
    });
    const moved = await files.move({ source: `${dir}/a/b.txt`, destination: `${dir}/moved.txt` });
    expect(moved.stat?.path).toBe(path.join(t.workspace, dir, "moved.txt"));
    expect((await files.chmod({ path: `${dir}/moved.txt`, mode: 0o600 })).stat?.mode).toBe(0o600);
    expect(statSync(path.join(t.workspace, dir, "moved.txt")).mode & 0o777).toBe(0o600);
    await files.remove({ path: `${dir}/a`, recursive: true });
    expect(readdirSync(path.join(t.workspace, dir))).toEqual(["moved.txt"]);
  });

  it("lists a large directory in pages that join up exactly", async () => {
    const files = client();
    mkdirSync(path.join(t.workspace, dir, "many"), { recursive: true });
    for (let index = 0; index < 2500; index++)
      writeFileSync(path.join(t.workspace, dir, "many", `f${String(index).padStart(4, "0")}`), "");
    const names: string[] = [];
    let pageToken = "";
    let pages = 0;
    do {
      const page = await files.list({ path: `${dir}/many`, pageSize: 1000, pageToken });
      names.push(...page.entries.map((entry) => entry.name));
      pageToken = page.nextPageToken;
      pages++;
    } while (pageToken !== "");
    expect(pages).toBe(3);
    expect(names).toEqual(Array.from({ length: 2500 }, (_, index) => `f${String(index).padStart(4, "0")}`));
  });

  it("an aborted upload leaves nothing behind and the old file as it was", async () => {
    const files = client();
    await writeFile(files, `${dir}/kept.txt`, "the old content");
    const aborting = new AbortController();
    async function* partial() {
      yield* writeParts({ path: `${dir}/kept.txt` }, Buffer.alloc(3 * 1024 * 1024, 7));
      aborting.abort();
      await new Promise(() => {});
    }
    await expect(files.write(partial(), { signal: aborting.signal })).rejects.toThrow();
    await waitFor(() => readdirSync(path.join(t.workspace, dir)).every((name) => !name.startsWith(".sandboxd-")), {
      what: "the temporary file to go",
    });
    expect(readFileSync(path.join(t.workspace, dir, "kept.txt"), "utf8")).toBe("the old content");
  });
});

describe.skipIf(process.getuid?.() !== 0)("bounded reads (root: a device node in the workspace)", () => {
  it("a device without a size stops at --max-unsized-read-bytes, or the caller's length, with an explicit event", async () => {
    const bounded = await startTestServer({ maxUnsizedReadBytes: 1024 * 1024 });
    try {
      execFileSync("mknod", [path.join(bounded.workspace, "zero"), "c", "1", "5"]);
      const files = bounded.connect(FileService);
      const capped = await readFile(files, "zero");
      expect(capped.data).toEqual(Buffer.alloc(1024 * 1024));
      expect(capped.events[0]).toMatchObject({ case: "stat", value: { type: FileType.CHARACTER_DEVICE } });
      expect(capped.events.slice(-2)).toEqual([
        {
          case: "limitReached",
          value: expect.objectContaining({ limit: ReadLimit.MAX_UNSIZED_READ_BYTES, limitBytes: 1048576n }),
        },
        { case: "end", value: expect.objectContaining({ bytesRead: 1048576n, eof: false }) },
      ]);
      const asked = await readFile(files, "zero", { length: 1000n });
      expect(asked.data.length).toBe(1000);
      expect(asked.events.at(-2)).toEqual({
        case: "limitReached",
        value: expect.objectContaining({ limit: ReadLimit.LENGTH, limitBytes: 1000n }),
      });
    } finally {
      await bounded.close();
    }
  });

  it("a file that grows while it is read stops at its size when opened, and says so", async () => {
    writeFileSync(path.join(t.workspace, "growing.log"), Buffer.alloc(4 * 1024 * 1024, 1));
    const stream = grpc.read({ path: "growing.log" })[Symbol.asyncIterator]();
    expect((await stream.next()).value.event.case).toBe("stat");
    const { appendFileSync } = await import("node:fs");
    appendFileSync(path.join(t.workspace, "growing.log"), Buffer.alloc(1024 * 1024, 2));
    const events = [];
    for (let next = await stream.next(); !next.done; next = await stream.next()) events.push(next.value.event);
    const bytes = events
      .filter((event) => event.case === "chunk")
      .reduce((total, event) => total + event.value.data.length, 0);
    expect(bytes).toBe(4 * 1024 * 1024);
    expect(events.slice(-2)).toEqual([
      { case: "limitReached", value: expect.objectContaining({ limit: ReadLimit.SIZE_AT_OPEN, limitBytes: 4194304n }) },
      { case: "end", value: expect.objectContaining({ eof: false }) },
    ]);
  });
});

describe("the REST surface of KEP-539.2 (filesystem.yaml)", () => {
  const url = (file: string, query = "") => `${t.server.url}/v1/files/${encodeURIComponent(file)}${query}`;

  it("PUT writes raw bytes atomically with parents and mode (204), GET reads them back with Content-Length, HEAD answers the headers", async () => {
    const put = await fetch(url("rest/dir/file.bin", "?mode=0600"), {
      method: "PUT",
      body: "rest bytes",
      headers: { "content-type": "application/octet-stream" },
    });
    expect(put.status).toBe(204);
    expect(statSync(path.join(t.workspace, "rest/dir/file.bin")).mode & 0o777).toBe(0o600);
    const get = await fetch(url("rest/dir/file.bin"));
    expect(get.status).toBe(200);
    expect(get.headers.get("content-type")).toBe("application/octet-stream");
    expect(get.headers.get("content-length")).toBe("10");
    expect(await get.text()).toBe("rest bytes");
    const head = await fetch(url("rest/dir/file.bin"), { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-length")).toBe("10");
    const missing = await fetch(url("rest/nothing"), { method: "HEAD" });
    expect(missing.status).toBe(404);
    const ranged = await fetch(url("rest/dir/file.bin"), { headers: { range: "bytes=5-7" } });
    expect(ranged.status).toBe(206);
    expect(ranged.headers.get("content-range")).toBe("bytes 5-7/10");
    expect(await ranged.text()).toBe("byt");
  });

  it("PUT takes a multipart/form-data form too, the bytes of its part file", async () => {
    const form = new FormData();
    form.append("file", new Blob([Buffer.from("from a form")]), "upload.txt");
    expect((await fetch(url("rest/form.txt"), { method: "PUT", body: form })).status).toBe(204);
    expect(readFileSync(path.join(t.workspace, "rest/form.txt"), "utf8")).toBe("from a form");
    const without = new FormData();
    without.append("other", "x");
    expect((await fetch(url("rest/form.txt"), { method: "PUT", body: without })).status).toBe(400);
    expect(readFileSync(path.join(t.workspace, "rest/form.txt"), "utf8")).toBe("from a form");
  });

  it("GET of a directory is the JSON listing: path and entries with name, size, type, modified_at and mode; symlinks out are left out", async () => {
    mkdirSync(path.join(t.workspace, "rest/listed/sub"), { recursive: true });
    writeFileSync(path.join(t.workspace, "rest/listed/a.txt"), "abc");
    symlinkSync("a.txt", path.join(t.workspace, "rest/listed/inside-link"));
    symlinkSync("/etc", path.join(t.workspace, "rest/listed/outside-link"));
    const response = await fetch(url("rest/listed"));
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/json");
    const listing = (await response.json()) as { path: string; entries: Record<string, unknown>[] };
    expect(listing.path).toBe("/rest/listed");
    expect(listing.entries).toEqual([
      {
        name: "a.txt",
        size: 3,
        type: "file",
        modified_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/),
        mode: "0644",
      },
      { name: "inside-link", size: 3, type: "file", modified_at: expect.any(String), mode: "0644" },
      { name: "sub", size: expect.any(Number), type: "directory", modified_at: expect.any(String), mode: "0755" },
    ]);
  });

  it("DELETE removes (204), refuses a non-empty directory without recursive (409) and empties the root with it", async () => {
    mkdirSync(path.join(t.workspace, "rest/gone/deep"), { recursive: true });
    const conflict = await fetch(url("rest/gone"), { method: "DELETE" });
    expect(conflict.status).toBe(409);
    expect(await conflict.json()).toEqual({
      code: "CONFLICT",
      message: "directory not empty: rest/gone",
      reason: "DIRECTORY_NOT_EMPTY",
      metadata: { path: "rest/gone" },
    });
    expect((await fetch(url("rest/gone", "?recursive=true"), { method: "DELETE" })).status).toBe(204);
    expect(existsSync(path.join(t.workspace, "rest/gone"))).toBe(false);
    expect((await fetch(url("rest/gone"), { method: "DELETE" })).status).toBe(404);
    expect((await fetch(url("rest/x", "?recursive=maybe"), { method: "DELETE" })).status).toBe(400);
    expect((await fetch(`${t.server.url}/v1/files/`, { method: "DELETE" })).status).toBe(409);
  });

  it("answers escapes 403, bad modes 400, writes over a directory 400, other methods 405, with the KEP's error shape", async () => {
    for (const escape of ["../etc/passwd", "/etc/passwd"]) {
      const response = await fetch(url(escape));
      expect(response.status).toBe(403);
      expect(await response.json()).toMatchObject({
        code: "PERMISSION_DENIED",
        reason: "PATH_OUTSIDE_WORKSPACE",
        message: expect.any(String),
      });
    }
    // As sent, not normalized by a URL parser on the way.
    const raw = await new Promise<number>((resolve, reject) =>
      http
        .get({ host: "127.0.0.1", port: t.server.port, path: "/v1/files/../../etc/passwd" }, (response) => {
          response.resume();
          resolve(response.statusCode!);
        })
        .on("error", reject),
    );
    expect(raw).toBe(403);
    expect((await fetch(url("rest/m", "?mode=755"), { method: "PUT", body: "x" })).status).toBe(400);
    expect((await fetch(url("rest"), { method: "PUT", body: "x" })).status).toBe(400);
    expect((await fetch(url("rest"), { method: "POST", body: "x" })).status).toBe(405);
  });

  it("an upload slower than the request timeout (1 s here) goes on while bytes arrive", async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const request = http.request(
        url("rest/slow.bin"),
        { method: "PUT", headers: { "content-type": "application/octet-stream" } },
        (response) => {
          response.resume();
          resolve(response.statusCode!);
        },
      );
      request.on("error", reject);
      let sent = 0;
      const drip = setInterval(() => {
        request.write(Buffer.alloc(1024, sent));
        if (++sent === 25) {
          clearInterval(drip);
          request.end();
        }
      }, 100);
    });
    expect(status).toBe(204);
    expect(statSync(path.join(t.workspace, "rest/slow.bin")).size).toBe(25 * 1024);
  });

  it("logs one line per operation, with the path, and counts bytes and operations in the metrics", async () => {
    await writeFile(grpc, "logged.txt", "12345");
    await fetch(url("logged.txt")).then((response) => response.text());
    await waitFor(
      () =>
        logLines.some(
          (line) => line.procedure === "sandbox.v1.FileService/Write" && line.path === "logged.txt" && line.bytes === 5,
        ),
      { what: "the Write's line" },
    );
    await waitFor(
      () =>
        logLines.some(
          (line) =>
            line.msg === "files request" &&
            line.method === "GET" &&
            line.path === "logged.txt" &&
            line.status === 200 &&
            line.bytes === 5,
        ),
      { what: "the GET's line" },
    );
    const metrics = await (await fetch(`${t.server.url}/metrics`)).text();
    expect(metrics).toMatch(/sandboxd_file_bytes_total\{direction="write"\} \d+/);
    expect(metrics).toMatch(/sandboxd_file_operations_total\{operation="read",surface="rest",result="ok"\} \d+/);
    expect(metrics).toMatch(/sandboxd_file_operations_total\{operation="write",surface="rpc",result="ok"\} \d+/);
  });
});

describe("the REST surface behind the daemon's gate", () => {
  it("needs the token as every RPC does (401 without it), and a daemon without one answers loopback Hosts only", async () => {
    const token = "files-rest-token";
    const guarded = await startTestServer({ token });
    try {
      writeFileSync(path.join(guarded.workspace, "guarded.txt"), "secret");
      const without = await fetch(`${guarded.server.url}/v1/files/guarded.txt`);
      expect(without.status).toBe(401);
      expect(await without.text()).not.toContain("secret");
      const withToken = await fetch(`${guarded.server.url}/v1/files/guarded.txt`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(await withToken.text()).toBe("secret");
      expect((await fetch(`${guarded.server.url}/v1/files/x.txt`, { method: "PUT", body: "x" })).status).toBe(401);
    } finally {
      await guarded.close();
    }
    const status = await new Promise<number>((resolve, reject) =>
      http
        .get(
          { host: "127.0.0.1", port: t.server.port, path: "/v1/files/logged.txt", headers: { host: "evil.example" } },
          (response) => {
            response.resume();
            resolve(response.statusCode!);
          },
        )
        .on("error", reject),
    );
    expect(status).toBe(403);
  });
});

describe("a slow reader", () => {
  it("pauses the read: the daemon reads ahead only what the transport holds", async () => {
    const size = 128 * 1024 * 1024;
    writeFileSync(path.join(t.workspace, "slow.bin"), Buffer.alloc(size, 3));
    const controller = new AbortController();
    const stream = grpc.read({ path: "slow.bin" }, { signal: controller.signal })[Symbol.asyncIterator]();
    let received = 0;
    for (let index = 0; index < 8; index++) {
      const next = await stream.next();
      if (next.value.event.case === "chunk") received += next.value.event.value.data.length;
    }
    // Stop reading; what the daemon read meanwhile is bounded by the windows and buffers in between.
    const readBytes = async () =>
      Number(
        /sandboxd_file_bytes_total\{direction="read"\} (\d+)/.exec(
          await (await fetch(`${t.server.url}/metrics`)).text(),
        )?.[1] ?? 0,
      );
    let before = -1;
    await waitFor(
      async () => {
        const now = await readBytes();
        const settled = now === before;
        before = now;
        return settled;
      },
      { intervalMs: 300, what: "the read to pause" },
    );
    expect(before - received).toBeLessThan(16 * 1024 * 1024);
    expect(before).toBeLessThan(size);
    controller.abort();
  });
});

describe("cancelled reads and watches", () => {
  it("let go of their files even when cancelled with a chunk unread (a generator parked on a yield)", async () => {
    writeFileSync(path.join(t.workspace, "held.bin"), Buffer.alloc(32 * 1024 * 1024, 5));
    await grpc.stat({ path: "held.bin" });
    const fds = () => readdirSync("/proc/self/fd").length;
    const before = fds();
    for (let index = 0; index < 20; index++) {
      const cancel = new AbortController();
      const stream = grpc.read({ path: "held.bin" }, { signal: cancel.signal })[Symbol.asyncIterator]();
      await stream.next();
      await stream.next();
      cancel.abort();
    }
    await waitFor(() => fds() <= before + 2, { what: "the cancelled reads' files to be closed" });
  });

  it("and cancelled watches with events unread stop their kernel watches (their fds are closed)", async () => {
    mkdirSync(path.join(t.workspace, "busy"));
    const fds = () => readdirSync("/proc/self/fd").length;
    const before = fds();
    for (let index = 0; index < 10; index++) {
      const cancel = new AbortController();
      const stream = grpc.watch({ path: "busy" }, { signal: cancel.signal })[Symbol.asyncIterator]();
      await stream.next();
      for (let file = 0; file < 50; file++) writeFileSync(path.join(t.workspace, "busy", `f${index}-${file}`), "x");
      await stream.next();
      cancel.abort();
    }
    await waitFor(() => fds() <= before + 2, { what: "the cancelled watches' fds to be closed" });
  });
});

describe("Watch", () => {
  async function* withTimeout(stream: AsyncIterable<WatchResponse>) {
    yield* stream;
  }

  it("reports create, write, attribute, rename and remove under a directory, recursively, with started first", async () => {
    mkdirSync(path.join(t.workspace, "watched"));
    const controller = new AbortController();
    const events: WatchResponse["event"][] = [];
    const done = (async () => {
      for await (const response of withTimeout(
        grpc.watch({ path: "watched", recursive: true }, { signal: controller.signal }),
      ))
        events.push(response.event);
    })().catch(() => {});
    await waitFor(() => events.length > 0, { what: "started" });
    expect(events[0]).toMatchObject({ case: "started", value: { watchedDirectories: 1 } });
    const base = path.join(t.workspace, "watched");
    writeFileSync(path.join(base, "one.txt"), "1");
    writeFileSync(path.join(base, "one.txt"), "12");
    chmodSync(path.join(base, "one.txt"), 0o600);
    mkdirSync(path.join(base, "sub"));
    await waitFor(
      () => events.some((event) => event.case === "change" && event.value.path === path.join(base, "sub")),
      { what: "the subdirectory's create" },
    );
    // The new subdirectory is watched: what happens in it is seen.
    await waitFor(
      () => {
        writeFileSync(path.join(base, "sub", "deep.txt"), "d");
        return events.some(
          (event) => event.case === "change" && event.value.path === path.join(base, "sub", "deep.txt"),
        );
      },
      { what: "a change in the new subdirectory" },
    );
    const { renameSync, rmSync } = await import("node:fs");
    renameSync(path.join(base, "one.txt"), path.join(base, "two.txt"));
    rmSync(path.join(base, "two.txt"));
    const changes = () =>
      events
        .filter((event) => event.case === "change")
        .map((event) => ({
          type: event.value.type,
          path: event.value.path.slice(base.length),
          oldPath: event.value.oldPath.slice(base.length),
        }));
    await waitFor(
      () => changes().some((change) => change.type === FileChangeType.REMOVE && change.path === "/two.txt"),
      { what: "the remove" },
    );
    expect(changes()).toEqual(
      expect.arrayContaining([
        { type: FileChangeType.CREATE, path: "/one.txt", oldPath: "" },
        { type: FileChangeType.WRITE, path: "/one.txt", oldPath: "" },
        { type: FileChangeType.ATTRIBUTE, path: "/one.txt", oldPath: "" },
        { type: FileChangeType.CREATE, path: "/sub", oldPath: "" },
        { type: FileChangeType.RENAME, path: "/two.txt", oldPath: "/one.txt" },
        { type: FileChangeType.REMOVE, path: "/two.txt", oldPath: "" },
      ]),
    );
    rmSync(base, { recursive: true });
    await waitFor(() => events.some((event) => event.case === "ended"), { what: "the end" });
    controller.abort();
    await done;
  });

  it("never shows a write's temporary file: a write is one create of a new file, one write of a replaced one", async () => {
    const base = path.join(t.workspace, "uploads");
    mkdirSync(base);
    const controller = new AbortController();
    const events: WatchResponse["event"][] = [];
    const done = (async () => {
      for await (const response of grpc.watch({ path: "uploads" }, { signal: controller.signal }))
        events.push(response.event);
    })().catch(() => {});
    await waitFor(() => events.length > 0, { what: "started" });
    // Several batches of the temporary's writes, a chmod of it, its rename; then a replace, over REST
    // too; then an upload that fails (its temporary created, written and removed).
    await writeFile(grpc, "uploads/new.bin", Buffer.alloc(3 * 1024 * 1024 + 5, 1));
    await writeFile(grpc, "uploads/new.bin", "replaced", { mode: 0o600 });
    const put = await fetch(`${t.server.url}/v1/files/uploads/rest.bin`, { method: "PUT", body: "over rest" });
    expect(put.status).toBe(204);
    await expect(
      grpc.write(writeParts({ path: "uploads/failed.bin", expectedSizeBytes: 10n }, Buffer.from("short"))),
    ).rejects.toThrow(/expected_size_bytes/);
    // A change of our own after all of those: once it is seen, so are they.
    writeFileSync(path.join(base, "marker"), "");
    const changes = () =>
      events
        .filter((event) => event.case === "change")
        .map((event) => ({
          type: event.value.type,
          path: event.value.path.slice(base.length),
          oldPath: event.value.oldPath,
        }));
    await waitFor(() => changes().some((change) => change.path === "/marker"), { what: "the marker's create" });
    expect(changes()).toEqual([
      { type: FileChangeType.CREATE, path: "/new.bin", oldPath: "" },
      { type: FileChangeType.WRITE, path: "/new.bin", oldPath: "" },
      { type: FileChangeType.CREATE, path: "/rest.bin", oldPath: "" },
      { type: FileChangeType.CREATE, path: "/marker", oldPath: "" },
    ]);
    expect(readdirSync(base).sort()).toEqual(["marker", "new.bin", "rest.bin"]);
    controller.abort();
    await done;
  });

  it("says when events were lost (overflow) and goes on", async () => {
    const base = path.join(t.workspace, "flood");
    mkdirSync(base);
    const controller = new AbortController();
    const stream = grpc.watch({ path: "flood" }, { signal: controller.signal })[Symbol.asyncIterator]();
    expect((await stream.next()).value.event.case).toBe("started");
    // Far more changes than the watch holds for a client that does not read.
    for (let index = 0; index < 6000; index++) writeFileSync(path.join(base, `f${index}`), "");
    const seen: WatchResponse["event"][] = [];
    await waitFor(
      async () => {
        seen.push((await stream.next()).value.event);
        return seen.some((event) => event.case === "overflow");
      },
      { intervalMs: 0, timeoutMs: 30_000, what: "an overflow event" },
    );
    const overflow = seen.find((event) => event.case === "overflow")!;
    expect([WatchOverflowSource.CLIENT, WatchOverflowSource.KERNEL]).toContain(overflow.value.source);
    writeFileSync(path.join(base, "after"), "");
    await waitFor(
      async () => {
        const event = (await stream.next()).value.event;
        return event.case === "change" && event.value.path === path.join(base, "after");
      },
      { intervalMs: 0, timeoutMs: 30_000, what: "events after the overflow" },
    );
    controller.abort();
  });
});

describe("sha256 of what was written", () => {
  it("the header's expected sha256 is checked against the bytes as they arrive", async () => {
    const data = Buffer.alloc(5 * 1024 * 1024, 9);
    const digest = createHash("sha256").update(data).digest("hex");
    const stat = await writeFile(grpc, "hashed.bin", data, {
      expectedSha256: digest,
      expectedSizeBytes: BigInt(data.length),
    });
    expect(stat.sizeBytes).toBe(BigInt(data.length));
    expect(
      createHash("sha256")
        .update(readFileSync(path.join(t.workspace, "hashed.bin")))
        .digest("hex"),
    ).toBe(digest);
  });
});
