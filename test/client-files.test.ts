import { spawn, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  FileExistsError,
  FileNotFoundError,
  type FileWatchEvent,
  ReadLimitError,
  type ReadProgress,
  type Sandbox,
  SandboxError,
} from "../src/client/index.js";
import { waitFor } from "./support/processes.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { startTcpProxy } from "./support/tcp-proxy.js";
import { repositoryRoot } from "./support/tools.js";

let t: TestServer;
let sandbox: Sandbox;
beforeAll(async () => {
  t = await startTestServer();
  sandbox = await connect({ baseUrl: t.server.url });
});
afterAll(async () => {
  await sandbox?.close();
  await t?.close();
});

/** A fresh directory in the workspace for one test: its name relative to the root, and its absolute path. */
function scratch(): { name: string; dir: string } {
  const name = `t-${randomBytes(4).toString("hex")}`;
  const dir = path.join(t.workspace, name);
  mkdirSync(dir);
  return { name, dir };
}

/** The SandboxError a promise rejects with. */
async function failure(promise: Promise<unknown>): Promise<SandboxError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(SandboxError);
  return error as SandboxError;
}

describe("sandbox.files: reads and writes", () => {
  it("writes text, bytes, a Blob, an async iterable and a web stream, and reads them back as text, bytes, a stream and a range", async () => {
    const { name, dir } = scratch();
    const info = await sandbox.files.write(`${name}/text.txt`, "héllo\n");
    expect(info).toMatchObject({
      path: path.join(dir, "text.txt"),
      name: "text.txt",
      type: "file",
      size: 7,
      mode: 0o644,
      permissions: "rw-r--r--",
    });
    expect(readFileSync(path.join(dir, "text.txt"), "utf8")).toBe("héllo\n");
    expect(await sandbox.files.read(`${name}/text.txt`)).toBe("héllo\n");

    const binary = randomBytes(300_000);
    await sandbox.files.write(`${name}/bytes.bin`, binary);
    await sandbox.files.write(`${name}/blob.bin`, new Blob([binary.subarray(0, 10), binary.subarray(10)]));
    await sandbox.files.write(
      `${name}/iterable.bin`,
      (async function* () {
        for (let at = 0; at < binary.length; at += 1000) yield binary.subarray(at, at + 1000);
      })(),
    );
    await sandbox.files.write(
      `${name}/stream.bin`,
      new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(binary.subarray(0, 150_000));
          controller.enqueue(binary.subarray(150_000));
          controller.close();
        },
      }),
    );
    for (const file of ["bytes.bin", "blob.bin", "iterable.bin", "stream.bin"]) {
      expect(readFileSync(path.join(dir, file)).equals(binary), file).toBe(true);
      expect(Buffer.from(await sandbox.files.read(`${name}/${file}`, { format: "bytes" })).equals(binary), file).toBe(
        true,
      );
    }
    const chunks: Uint8Array[] = [];
    for await (const chunk of await sandbox.files.read(`${name}/bytes.bin`, { format: "stream" })) chunks.push(chunk);
    expect(Buffer.concat(chunks).equals(binary)).toBe(true);
    const range = await sandbox.files.read(`${name}/bytes.bin`, { format: "bytes", offset: 1000, length: 5000 });
    expect(Buffer.from(range).equals(binary.subarray(1000, 6000))).toBe(true);
    expect(await sandbox.files.read(`${name}/text.txt`, { offset: 1, length: 2 })).toBe("é");
    expect(await sandbox.files.read(`${name}/text.txt`, { offset: 100 })).toBe("");
  });

  it("applies a mode, creates parents unless told not to, and refuses to overwrite with overwrite: false", async () => {
    const { name, dir } = scratch();
    const info = await sandbox.files.write(`${name}/deep/er/run.sh`, "#!/bin/sh\n", { mode: "755" });
    expect(info.mode).toBe(0o755);
    expect(statSync(path.join(dir, "deep/er/run.sh")).mode & 0o7777).toBe(0o755);
    const exists = await failure(sandbox.files.write(`${name}/deep/er/run.sh`, "other", { overwrite: false }));
    expect(exists).toBeInstanceOf(FileExistsError);
    expect(exists).toMatchObject({ code: "ALREADY_EXISTS", reason: "PATH_ALREADY_EXISTS" });
    expect(readFileSync(path.join(dir, "deep/er/run.sh"), "utf8")).toBe("#!/bin/sh\n");
    const missing = await failure(sandbox.files.write(`${name}/absent/file.txt`, "x", { createParents: false }));
    expect(missing).toBeInstanceOf(FileNotFoundError);
    expect(missing).toMatchObject({ code: "NOT_FOUND", reason: "PATH_NOT_FOUND" });
  });

  it("checks an expected size and sha256 and leaves nothing behind on a mismatch", async () => {
    const { name, dir } = scratch();
    const data = randomBytes(10_000);
    const sha = createHash("sha256").update(data).digest("hex");
    await sandbox.files.write(`${name}/ok.bin`, data, { expectedSize: data.length, expectedSha256: sha });
    const wrong = await failure(sandbox.files.write(`${name}/bad.bin`, data, { expectedSha256: "0".repeat(64) }));
    expect(wrong).toMatchObject({ code: "DATA_LOSS", reason: "CONTENT_MISMATCH" });
    const short = await failure(sandbox.files.write(`${name}/bad.bin`, data, { expectedSize: data.length + 1 }));
    expect(short).toMatchObject({ code: "DATA_LOSS", reason: "CONTENT_MISMATCH" });
    expect(readdirSync(dir)).toEqual(["ok.bin"]);
  });

  it("uploads and downloads local files, streamed, keeping their permission bits", async () => {
    const { name } = scratch();
    const local = mkdtemp();
    try {
      const source = path.join(local, "tool");
      writeFileSync(source, randomBytes(3 * 1024 * 1024 + 7), { mode: 0o750 });
      const uploaded = await sandbox.files.uploadFile(source, `${name}/tool`);
      expect(uploaded).toMatchObject({ size: 3 * 1024 * 1024 + 7, mode: 0o750 });
      const target = path.join(local, "back");
      const downloaded = await sandbox.files.downloadFile(`${name}/tool`, target);
      expect(downloaded.size).toBe(3 * 1024 * 1024 + 7);
      expect(readFileSync(target).equals(readFileSync(source))).toBe(true);
      expect(statSync(target).mode & 0o7777).toBe(0o750);
      await failure(sandbox.files.downloadFile(`${name}/missing`, path.join(local, "never")));
      expect(readdirSync(local).sort()).toEqual(["back", "tool"]);
    } finally {
      rmSync(local, { recursive: true, force: true });
    }
  });
});

describe("sandbox.files: directories and metadata", () => {
  it("lists every page of a large directory, to a depth, with types, sizes, owners and symlink targets", async () => {
    const { name, dir } = scratch();
    for (let i = 0; i < 2500; i++) writeFileSync(path.join(dir, `f${String(i).padStart(4, "0")}`), "x".repeat(i % 7));
    mkdirSync(path.join(dir, "sub"));
    writeFileSync(path.join(dir, "sub", "inner.txt"), "inner");
    symlinkSync("f0001", path.join(dir, "link"));
    const shallow = await sandbox.files.list(name);
    expect(shallow).toHaveLength(2502);
    expect(shallow.find((entry) => entry.name === "f0006")).toMatchObject({
      type: "file",
      size: 6,
      path: path.join(dir, "f0006"),
    });
    expect(shallow.find((entry) => entry.name === "link")).toMatchObject({ type: "symlink", symlinkTarget: "f0001" });
    expect(shallow.find((entry) => entry.name === "sub")).toMatchObject({ type: "directory" });
    const owner = shallow[0];
    expect(owner.uid).toBe(process.getuid!());
    expect(owner.modifiedTime).toBeInstanceOf(Date);
    const deep = await sandbox.files.list(name, { depth: 2 });
    expect(deep.map((entry) => entry.path)).toContain(path.join(dir, "sub", "inner.txt"));
    expect(deep).toHaveLength(2503);
    const paths = deep.map((entry) => entry.path);
    expect(paths).toEqual([...paths].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))));
  });

  it("stats, tests existence, makes directories, renames, changes modes and removes", async () => {
    const { name, dir } = scratch();
    expect(await sandbox.files.exists(`${name}/a`)).toBe(false);
    expect(await sandbox.files.makeDir(`${name}/a/b`)).toBe(true);
    expect(await sandbox.files.makeDir(`${name}/a/b`)).toBe(false);
    expect(await sandbox.files.exists(`${name}/a/b`)).toBe(true);
    const made = await sandbox.files.mkdir(`${name}/c`, { mode: 0o700 });
    expect(made).toMatchObject({ type: "directory", mode: 0o700 });
    expect(await failure(sandbox.files.mkdir(`${name}/c`))).toBeInstanceOf(FileExistsError);
    expect((await sandbox.files.mkdir(`${name}/c`, { recursive: true })).type).toBe("directory");

    await sandbox.files.write(`${name}/a/file.txt`, "content");
    symlinkSync("file.txt", path.join(dir, "a", "link"));
    expect((await sandbox.files.stat(`${name}/a/link`)).type).toBe("symlink");
    expect(await sandbox.files.stat(`${name}/a/link`, { followSymlinks: true })).toMatchObject({
      type: "file",
      size: 7,
    });
    expect(await sandbox.files.getInfo(`${name}/a/file.txt`)).toMatchObject({ type: "file", size: 7 });

    const moved = await sandbox.files.rename(`${name}/a/file.txt`, `${name}/c/moved.txt`);
    expect(moved.path).toBe(path.join(dir, "c", "moved.txt"));
    expect(existsSync(path.join(dir, "a", "file.txt"))).toBe(false);
    await sandbox.files.write(`${name}/other.txt`, "other");
    expect(await failure(sandbox.files.rename(`${name}/other.txt`, `${name}/c/moved.txt`))).toBeInstanceOf(
      FileExistsError,
    );
    await sandbox.files.rename(`${name}/other.txt`, `${name}/c/moved.txt`, { overwrite: true });
    expect(readFileSync(path.join(dir, "c", "moved.txt"), "utf8")).toBe("other");

    expect((await sandbox.files.chmod(`${name}/c/moved.txt`, 0o600)).permissions).toBe("rw-------");
    expect(statSync(path.join(dir, "c", "moved.txt")).mode & 0o7777).toBe(0o600);

    const notEmpty = await failure(sandbox.files.remove(`${name}/c`));
    expect(notEmpty).toMatchObject({ code: "FAILED_PRECONDITION", reason: "DIRECTORY_NOT_EMPTY" });
    await sandbox.files.remove(`${name}/c`, { recursive: true });
    expect(existsSync(path.join(dir, "c"))).toBe(false);
    await sandbox.files.remove(`${name}/a/link`);
    expect(existsSync(path.join(dir, "a", "file.txt"))).toBe(false);
    expect(lstatSync(path.join(dir, "a")).isDirectory()).toBe(true);
    expect(await failure(sandbox.files.remove(`${name}/gone`))).toBeInstanceOf(FileNotFoundError);
    await sandbox.files.remove(`${name}/gone`, { force: true });
  });
});

describe("sandbox.files: errors by reason", () => {
  it("names each refusal by the daemon's reason and code, and refuses bad options before any call", async () => {
    const { name } = scratch();
    await sandbox.files.write(`${name}/file`, "x");
    const cases: [() => Promise<unknown>, string, string][] = [
      [() => sandbox.files.read(`${name}/missing`), "NOT_FOUND", "PATH_NOT_FOUND"],
      [() => sandbox.files.read("../etc/passwd"), "PERMISSION_DENIED", "PATH_OUTSIDE_WORKSPACE"],
      [() => sandbox.files.read("/etc/passwd"), "PERMISSION_DENIED", "PATH_OUTSIDE_WORKSPACE"],
      [() => sandbox.files.read(name), "FAILED_PRECONDITION", "IS_A_DIRECTORY"],
      [() => sandbox.files.list(`${name}/file`), "FAILED_PRECONDITION", "NOT_A_DIRECTORY"],
      [() => sandbox.files.stat(""), "INVALID_ARGUMENT", "INVALID_ARGUMENT"],
      [() => sandbox.files.write(`${name}/a\0b`, "x"), "INVALID_ARGUMENT", "INVALID_ARGUMENT"],
      [() => sandbox.files.remove("."), "FAILED_PRECONDITION", "WORKSPACE_ROOT"],
    ];
    for (const [call, code, reason] of cases) {
      const error = await failure(call());
      expect({ code: error.code, reason: error.reason }, error.message).toEqual({ code, reason });
    }
    const notFound = (await failure(sandbox.files.stat(`${name}/missing`))) as FileNotFoundError;
    expect(notFound.path).toBe(`${name}/missing`);
    const unknown = await failure(sandbox.files.read(`${name}/file`, { lenght: 1 } as never));
    expect(unknown.code).toBe("INVALID_ARGUMENT");
    expect((await failure(sandbox.files.chmod(`${name}/file`, "rwx"))).code).toBe("INVALID_ARGUMENT");
    expect(() => sandbox.files.iterate(`${name}/file`, { format: "text" } as never)).toThrow(/unknown option format/);
    expect((await failure(sandbox.files.read(`${name}/file`, { offset: -1 }))).code).toBe("INVALID_ARGUMENT");
    const stopped = await connect({ baseUrl: t.server.url });
    await stopped.close();
    expect((await failure(stopped.files.stat(name))).code).toBe("NOT_RUNNING");
  });
});

describe("sandbox.files: files without a size", () => {
  it.runIf(process.getuid?.() === 0)(
    "a read the daemon stops at its limit fails with ReadLimitError after the bytes before it; a length reads such a file on purpose",
    async () => {
      const limited = await startTestServer({ maxUnsizedReadBytes: 100_000 });
      const client = await connect({ baseUrl: limited.server.url });
      try {
        // A character device like /dev/zero (1, 5), made inside the workspace: it has no size and never ends.
        const made = spawnSync("mknod", [path.join(limited.workspace, "zero"), "c", "1", "5"]);
        expect(made.status, made.stderr.toString()).toBe(0);
        expect((await client.files.stat("zero")).type).toBe("character-device");
        const error = await failure(client.files.read("zero", { format: "bytes" }));
        expect(error).toBeInstanceOf(ReadLimitError);
        expect(error).toMatchObject({ code: "READ_LIMIT_REACHED", limitBytes: 100_000 });
        let streamed = 0;
        const stream = client.files.iterate("zero");
        await expect(
          (async () => {
            for await (const chunk of stream) streamed += chunk.length;
          })(),
        ).rejects.toBeInstanceOf(ReadLimitError);
        expect(streamed).toBe(100_000);
        expect((await client.files.read("zero", { format: "bytes", length: 4096 })).length).toBe(4096);
      } finally {
        await client.close();
        await limited.close();
      }
    },
  );
});

describe("sandbox.files: cancellation", () => {
  it("an upload aborted in the middle leaves nothing behind, and the old file intact", async () => {
    const { name, dir } = scratch();
    writeFileSync(path.join(dir, "target"), "old");
    const controller = new AbortController();
    let sent = 0;
    const endless = (async function* () {
      for (;;) {
        yield randomBytes(256 * 1024);
        sent += 256 * 1024;
        if (sent === 8 * 1024 * 1024) controller.abort(new Error("enough"));
      }
    })();
    const outcome = await sandbox.files.write(`${name}/target`, endless, { signal: controller.signal }).then(
      () => "resolved",
      (error: Error) => error.message,
    );
    expect(outcome).toBe("enough");
    // The daemon removes its temporary file once it sees the cancel.
    await waitFor(() => readdirSync(dir).length === 1, { what: "the temporary file to go", timeoutMs: 20_000 });
    expect(readdirSync(dir)).toEqual(["target"]);
    expect(readFileSync(path.join(dir, "target"), "utf8")).toBe("old");
  });

  it("a download aborted in the middle rejects with the signal's reason and leaves no local file", async () => {
    const { name, dir } = scratch();
    writeFileSync(path.join(dir, "big"), randomBytes(32 * 1024 * 1024));
    const local = mkdtemp();
    try {
      const controller = new AbortController();
      const outcome = sandbox.files.downloadFile(`${name}/big`, path.join(local, "big"), {
        signal: controller.signal,
        onProgress: (received) => {
          if (received >= 4 * 1024 * 1024) controller.abort(new Error("stop"));
        },
      });
      await expect(outcome).rejects.toThrow("stop");
      expect(readdirSync(local)).toEqual([]);
      const stream = await sandbox.files.read(`${name}/big`, { format: "stream" });
      const reader = stream.getReader();
      expect((await reader.read()).done).toBe(false);
      await reader.cancel();
    } finally {
      rmSync(local, { recursive: true, force: true });
    }
  });
});

describe("sandbox.files: resuming a read", () => {
  it("a read whose connection is cut resumes at the offset it handed over, sha256-exact", async () => {
    const { name, dir } = scratch();
    const data = randomBytes(48 * 1024 * 1024);
    writeFileSync(path.join(dir, "big"), data);
    const proxy = await startTcpProxy({ host: "127.0.0.1", port: t.server.port });
    const cut = await connect({ baseUrl: proxy.url, reconnect: { backoffBaseMs: 20, backoffMaxMs: 200 } });
    try {
      const hash = createHash("sha256");
      const progress: ReadProgress = { offset: 0, resumes: 0 };
      let cuts = 0;
      for await (const chunk of cut.files.iterate(`${name}/big`, {}, progress)) {
        hash.update(chunk);
        if ((progress.offset > 8 * 1024 * 1024 && cuts === 0) || (progress.offset > 30 * 1024 * 1024 && cuts === 1))
          cuts += Math.min(1, proxy.cut());
      }
      expect(progress.offset).toBe(data.length);
      expect(hash.digest("hex")).toBe(createHash("sha256").update(data).digest("hex"));
      expect(progress.resumes).toBeGreaterThanOrEqual(cuts);
      expect(cuts).toBe(2);
    } finally {
      await cut.close();
      await proxy.close();
    }
  });

  it("a read does not resume into a file that changed meanwhile", async () => {
    const { name, dir } = scratch();
    // Large enough that the read is still going when the connection is cut, whatever the windows hold.
    writeFileSync(path.join(dir, "big"), randomBytes(64 * 1024 * 1024));
    const proxy = await startTcpProxy({ host: "127.0.0.1", port: t.server.port });
    const cut = await connect({ baseUrl: proxy.url, reconnect: { backoffBaseMs: 20, backoffMaxMs: 200 } });
    try {
      const progress: ReadProgress = { offset: 0, resumes: 0 };
      const reading = (async () => {
        for await (const _ of cut.files.iterate(`${name}/big`, {}, progress)) {
          if (progress.offset > 4 * 1024 * 1024 && proxy.cuts === 0) {
            // A new file in its place (the daemon's open one reads on, so only the resume can notice).
            writeFileSync(path.join(dir, "big.new"), "replaced");
            renameSync(path.join(dir, "big.new"), path.join(dir, "big"));
            proxy.cut();
          }
        }
      })();
      const error = await failure(reading);
      expect(error.code).toBe("FILE_CHANGED");
    } finally {
      await cut.close();
      await proxy.close();
    }
  });
});

describe("sandbox.files: watch", () => {
  it("yields the changes after it started, recursively, ends when closed, and says when its directory went away", async () => {
    const { name, dir } = scratch();
    mkdirSync(path.join(dir, "sub"));
    const watch = await sandbox.files.watch(name, { recursive: true });
    expect(watch.directory.path).toBe(dir);
    expect(watch.watchedDirectories).toBe(2);
    writeFileSync(path.join(dir, "sub", "new.txt"), "x");
    const seen: FileWatchEvent[] = [];
    for await (const event of watch) {
      seen.push(event);
      if (event.type === "create" && event.path === path.join(dir, "sub", "new.txt")) break;
    }
    expect(seen.at(-1)).toEqual({ type: "create", path: path.join(dir, "sub", "new.txt"), isDirectory: false });

    const second = await sandbox.files.watch(`${name}/sub`);
    const loop = (async () => {
      const events: FileWatchEvent[] = [];
      for await (const event of second) events.push(event);
      return events;
    })();
    writeFileSync(path.join(dir, "sub", "other.txt"), "y");
    await waitFor(async () => existsSync(path.join(dir, "sub", "other.txt")));
    rmSync(path.join(dir, "sub"), { recursive: true });
    const events = await loop;
    expect(events).toContainEqual({ type: "create", path: path.join(dir, "sub", "other.txt"), isDirectory: false });
    expect(second.endReason).toBe("directory-removed");
  });

  it("ends quietly on close(), throws the reason of its signal, and reports lost changes as an overflow", async () => {
    const { name, dir } = scratch();
    const watch = await sandbox.files.watch(name);
    const loop = (async () => {
      for await (const _ of watch);
      return "ended";
    })();
    watch.close();
    expect(await loop).toBe("ended");

    const controller = new AbortController();
    const aborted = await sandbox.files.watch(name, { signal: controller.signal });
    const abortedLoop = (async () => {
      for await (const _ of aborted);
    })();
    controller.abort(new Error("done watching"));
    await expect(abortedLoop).rejects.toThrow("done watching");

    // Nobody reads while far more changes happen than the daemon queues for one watch.
    const slow = await sandbox.files.watch(name);
    const result = await sandbox.exec(`cd ${dir} && seq 1 60000 | xargs touch && seq 1 60000 | xargs rm`, {
      timeout: 120_000,
    });
    expect(result.exitCode).toBe(0);
    let overflow: FileWatchEvent | undefined;
    for await (const event of slow) {
      if (event.type === "overflow") {
        overflow = event;
        break;
      }
    }
    expect(overflow).toMatchObject({ type: "overflow", source: "client" });
  }, 180_000);
});

describe("sandbox.files: a watch on a broken connection", () => {
  it("is set up again on a new connection and says changes may have been lost, then reports the changes after it", async () => {
    const { name, dir } = scratch();
    const proxy = await startTcpProxy({ host: "127.0.0.1", port: t.server.port });
    const cut = await connect({ baseUrl: proxy.url, reconnect: { backoffBaseMs: 20, backoffMaxMs: 200 } });
    try {
      const watch = await cut.files.watch(name);
      const events = watch[Symbol.asyncIterator]();
      // A directory: one event each (a file's write would be another).
      mkdirSync(path.join(dir, "before"));
      expect((await events.next()).value).toEqual({
        type: "create",
        path: path.join(dir, "before"),
        isDirectory: true,
      });
      expect(proxy.cut()).toBeGreaterThan(0);
      expect((await events.next()).value).toEqual({ type: "overflow", source: "reconnect", lostEvents: 0 });
      mkdirSync(path.join(dir, "after"));
      expect((await events.next()).value).toEqual({ type: "create", path: path.join(dir, "after"), isDirectory: true });
      watch.close();
      expect((await events.next()).done).toBe(true);
      expect(proxy.connections).toBe(2);
    } finally {
      await cut.close();
      await proxy.close();
    }
  });
});

describe("sandbox.files: calls that change nothing", () => {
  it("a stat or a listing that cannot reach the daemon is tried again; a write is not", async () => {
    const { name, dir } = scratch();
    writeFileSync(path.join(dir, "file"), "x");
    const proxy = await startTcpProxy({ host: "127.0.0.1", port: t.server.port });
    let attempts: string[] = [];
    let failFirst = false;
    const cut = await connect({
      baseUrl: proxy.url,
      reconnect: { backoffBaseMs: 20, backoffMaxMs: 200 },
      interceptors: [
        (next) => (request) => {
          attempts.push(request.method.name);
          // The first attempt of a call finds the daemon unreachable (connections reset, new ones refused).
          const first = attempts.length === 1;
          proxy.refuse(failFirst && first);
          if (failFirst && first) proxy.cut();
          return next(request);
        },
      ],
    });
    failFirst = true;
    try {
      attempts = [];
      // Node reports the reset stream as UNAVAILABLE or CANCELED; either way the write fails once.
      expect(["UNAVAILABLE", "CANCELED"]).toContain((await failure(cut.files.write(`${name}/written`, "x"))).code);
      expect(attempts).toEqual(["Write"]);
      expect(existsSync(path.join(dir, "written"))).toBe(false);
      attempts = [];
      expect((await cut.files.stat(`${name}/file`)).size).toBe(1);
      expect(attempts).toEqual(["Stat", "Stat"]);
      attempts = [];
      expect((await cut.files.list(name)).map((entry) => entry.name)).toEqual(["file"]);
      expect(attempts).toEqual(["List", "List"]);
    } finally {
      await cut.close();
      await proxy.close();
    }
  });
});

describe("sandbox.files: memory", () => {
  it("streams 256 MiB up and down with the client's RSS growing by a bounded amount, sha256-exact (in a process of its own)", async () => {
    const { name } = scratch();
    const size = 256 * 1024 * 1024;
    const child = spawn(
      process.execPath,
      [
        "--expose-gc",
        "--import",
        "tsx",
        "test/support/files-transfer-child.ts",
        t.server.url,
        `${name}/big`,
        String(size),
      ],
      {
        cwd: repositoryRoot,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (data: Buffer) => (stdout += data.toString()));
    child.stderr.on("data", (data: Buffer) => (stderr += data.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    expect(code, stderr).toBe(0);
    const report = JSON.parse(stdout) as {
      size: number;
      received: number;
      uploadSha256: string;
      downloadSha256: string;
      baselineRss: number;
      peakRss: number;
    };
    expect(report.size).toBe(size);
    expect(report.received).toBe(size);
    expect(report.downloadSha256).toBe(report.uploadSha256);
    const onDisk = createHash("sha256")
      .update(readFileSync(path.join(t.workspace, name, "big")))
      .digest("hex");
    expect(onDisk).toBe(report.uploadSha256);
    // A client that kept what it streams would grow by 256 MiB or more; windows, a message in flight and garbage
    // V8 had not collected yet took 12 to 50 MiB on a 2-core machine.
    expect(report.peakRss - report.baselineRss).toBeLessThan(96 * 1024 * 1024);
  }, 300_000);
});

function mkdtemp(): string {
  const dir = path.join(tmpdir(), `sandboxd-files-${randomBytes(4).toString("hex")}`);
  mkdirSync(dir);
  return dir;
}
