import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileService } from "../gen/sandbox/v1/files_pb.js";
import { resolveUser } from "../src/process/index.js";
import { startDaemonProcess } from "./support/daemon-process.js";
import { expectReason } from "./support/errors.js";
import { type FilesClient, writeFile, writeParts } from "./support/files.js";
import { waitFor } from "./support/processes.js";
import { Code, rpcError, streamError } from "./support/rpc.js";
import { createWorkspace, startTestServer, type TestServer } from "./support/server.js";

// Every file reason of the proto from a real call against a real daemon: its status code, its
// ErrorInfo reason and its metadata, exactly.

const isRoot = process.getuid?.() === 0;
let t: TestServer;
/** The first workspace root. */
let workspace: string;
let files: FilesClient;
/** A 1 MiB tmpfs (root only): a full disk, a second filesystem, a mount point. */
let small: string | undefined;
/** A read-only tmpfs. */
let readOnly: string | undefined;

/** Where the mounts live. */
let base: string;

beforeAll(async () => {
  base = mkdtempSync(path.join(os.tmpdir(), "files-errors-mounts-"));
  if (isRoot) {
    small = path.join(base, "small");
    readOnly = path.join(base, "read-only");
    mkdirSync(small);
    mkdirSync(readOnly);
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", small]);
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", readOnly]);
  }
  workspace = createWorkspace();
  // The mounts are workspace roots of their own, after the test's own.
  const roots = [workspace, ...(small !== undefined ? [small, readOnly!] : [])];
  t = await startTestServer({
    workspaceRoots: roots,
    fileLimits: { maxTransfersPerConnection: 2, maxWatchesPerConnection: 1 },
  });
  files = t.connect(FileService);
  writeFileSync(path.join(workspace, "file.txt"), "content");
  mkdirSync(path.join(workspace, "dir"));
  writeFileSync(path.join(workspace, "dir", "inner"), "x");
  symlinkSync("/etc", path.join(workspace, "etc-link"));
  symlinkSync("loop-b", path.join(workspace, "loop-a"));
  symlinkSync("loop-a", path.join(workspace, "loop-b"));
  execFileSync("mkfifo", [path.join(workspace, "fifo")]);
  if (small !== undefined) mkdirSync(path.join(workspace, "mounted"));
});

afterAll(async () => {
  await t?.close();
  rmSync(workspace, { recursive: true, force: true });
  for (const mount of [small, readOnly]) if (mount !== undefined) execFileSync("umount", ["-l", mount]);
  rmSync(base, { recursive: true, force: true });
});

describe("every file reason, with its code and metadata", () => {
  it("PATH_NOT_FOUND names the path, from every call that takes one", async () => {
    const expected = { code: Code.NotFound, reason: "PATH_NOT_FOUND", metadata: { path: "missing" } };
    expectReason(await rpcError(files.stat({ path: "missing" })), expected);
    expectReason(await streamError(files.read({ path: "missing" })), expected);
    expectReason(await rpcError(files.list({ path: "missing" })), expected);
    expectReason(await rpcError(files.remove({ path: "missing" })), expected);
    expectReason(await rpcError(files.chmod({ path: "missing", mode: 0o644 })), expected);
    expectReason(await streamError(files.watch({ path: "missing" })), expected);
    expectReason(await rpcError(files.move({ source: "missing", destination: "elsewhere" })), expected);
    expectReason(await rpcError(files.makeDir({ path: "missing/child" })), {
      ...expected,
      metadata: { path: "missing/child" },
    });
    expectReason(await rpcError(writeFile(files, "missing/child", "x")), {
      ...expected,
      metadata: { path: "missing/child" },
    });
  });

  it("PATH_ALREADY_EXISTS: MakeDir without parents, Write with fail_if_exists, Move without overwrite", async () => {
    expectReason(await rpcError(files.makeDir({ path: "dir" })), {
      code: Code.AlreadyExists,
      reason: "PATH_ALREADY_EXISTS",
      metadata: { path: "dir" },
    });
    expectReason(await rpcError(writeFile(files, "file.txt", "new", { failIfExists: true })), {
      code: Code.AlreadyExists,
      reason: "PATH_ALREADY_EXISTS",
      metadata: { path: "file.txt" },
    });
    await writeFile(files, "other.txt", "other");
    expectReason(await rpcError(files.move({ source: "other.txt", destination: "file.txt" })), {
      code: Code.AlreadyExists,
      reason: "PATH_ALREADY_EXISTS",
      metadata: { path: "file.txt" },
    });
  });

  it("PATH_OUTSIDE_WORKSPACE for .., absolute paths elsewhere and symlinks out, naming the field", async () => {
    for (const escape of ["../x", "/etc/passwd", "etc-link/passwd", "dir/../../x"]) {
      expectReason(await streamError(files.read({ path: escape })), {
        code: Code.PermissionDenied,
        reason: "PATH_OUTSIDE_WORKSPACE",
        metadata: { path: escape },
      });
    }
    expectReason(await rpcError(files.move({ source: "file.txt", destination: "/tmp/stolen" })), {
      code: Code.PermissionDenied,
      reason: "PATH_OUTSIDE_WORKSPACE",
      metadata: { path: "/tmp/stolen", field: "destination" },
    });
  });

  it("IS_A_DIRECTORY, NOT_A_DIRECTORY, DIRECTORY_NOT_EMPTY, NOT_A_REGULAR_FILE", async () => {
    expectReason(await streamError(files.read({ path: "dir" })), {
      code: Code.FailedPrecondition,
      reason: "IS_A_DIRECTORY",
      metadata: { path: "dir" },
    });
    expectReason(await rpcError(writeFile(files, "dir", "x")), {
      code: Code.FailedPrecondition,
      reason: "IS_A_DIRECTORY",
      metadata: { path: "dir" },
    });
    expectReason(await rpcError(files.list({ path: "file.txt" })), {
      code: Code.FailedPrecondition,
      reason: "NOT_A_DIRECTORY",
      metadata: { path: "file.txt" },
    });
    expectReason(await rpcError(files.remove({ path: "dir" })), {
      code: Code.FailedPrecondition,
      reason: "DIRECTORY_NOT_EMPTY",
      metadata: { path: "dir" },
    });
    expectReason(await streamError(files.read({ path: "fifo" })), {
      code: Code.FailedPrecondition,
      reason: "NOT_A_REGULAR_FILE",
      metadata: { path: "fifo", type: "FIFO" },
    });
    expectReason(await rpcError(writeFile(files, "fifo", "x")), {
      code: Code.FailedPrecondition,
      reason: "NOT_A_REGULAR_FILE",
      metadata: { path: "fifo", type: "FIFO" },
    });
  });

  it("CONTENT_MISMATCH for a size or a sha256 other than the header's, and nothing is written", async () => {
    expectReason(await rpcError(writeFile(files, "sized.txt", "12345", { expectedSizeBytes: 4n })), {
      code: Code.DataLoss,
      reason: "CONTENT_MISMATCH",
      metadata: { path: "sized.txt", field: "expected_size_bytes", expected: "4", actual: "more than 4" },
    });
    expectReason(await rpcError(writeFile(files, "sized.txt", "123", { expectedSizeBytes: 4n })), {
      code: Code.DataLoss,
      reason: "CONTENT_MISMATCH",
      metadata: { path: "sized.txt", field: "expected_size_bytes", expected: "4", actual: "3" },
    });
    const wrong = "0".repeat(64);
    const actual = "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3"; // sha256("123")
    expectReason(await rpcError(writeFile(files, "sized.txt", "123", { expectedSha256: wrong })), {
      code: Code.DataLoss,
      reason: "CONTENT_MISMATCH",
      metadata: { path: "sized.txt", field: "expected_sha256", expected: wrong, actual },
    });
    expectReason(await rpcError(files.stat({ path: "sized.txt" })), {
      code: Code.NotFound,
      reason: "PATH_NOT_FOUND",
      metadata: { path: "sized.txt" },
    });
    expect(
      (await writeFile(files, "sized.txt", "123", { expectedSizeBytes: 3n, expectedSha256: actual.toUpperCase() }))
        .sizeBytes,
    ).toBe(3n);
  });

  it("WORKSPACE_ROOT: a root is neither removed nor moved", async () => {
    expectReason(await rpcError(files.remove({ path: ".", recursive: true })), {
      code: Code.FailedPrecondition,
      reason: "WORKSPACE_ROOT",
      metadata: { path: "." },
    });
    expectReason(await rpcError(files.move({ source: workspace, destination: "x" })), {
      code: Code.FailedPrecondition,
      reason: "WORKSPACE_ROOT",
      metadata: { path: workspace },
    });
  });

  it("SYMLINK_LOOP names the path", async () => {
    expectReason(await streamError(files.read({ path: "loop-a" })), {
      code: Code.FailedPrecondition,
      reason: "SYMLINK_LOOP",
      metadata: { path: "loop-a" },
    });
  });

  it("INVALID_ARGUMENT for an empty path, a NUL byte, a path over 4096 bytes, a mode over 07777, a bad page token, a Write without its header", async () => {
    const field = (name: string) => ({
      code: Code.InvalidArgument,
      reason: "INVALID_ARGUMENT",
      metadata: { field: name },
    });
    expectReason(await rpcError(files.stat({ path: "" })), field("path"));
    expectReason(await rpcError(files.stat({ path: "a\0b" })), field("path"));
    expectReason(await rpcError(files.stat({ path: "a/".repeat(2049) })), field("path"));
    expectReason(await rpcError(files.stat({ path: "x".repeat(300) })), field("path"));
    expectReason(await rpcError(files.chmod({ path: "file.txt", mode: 0o10000 })), field("mode"));
    expectReason(await rpcError(files.list({ path: ".", pageToken: "not-a-token" })), field("page_token"));
    expectReason(await rpcError(files.move({ source: "dir", destination: "dir/inside" })), field("destination"));
    async function* dataOnly() {
      yield { part: { case: "data" as const, value: new Uint8Array(3) } };
    }
    expectReason(await rpcError(files.write(dataOnly())), field("header"));
  });

  it("LIMIT_EXCEEDED names the flag and its value: transfers and watches per connection", async () => {
    writeFileSync(path.join(workspace, "big"), Buffer.alloc(32 * 1024 * 1024));
    // Two reads held open (their first event taken, the rest not read) fill the connection's transfers.
    const holding = new AbortController();
    const holders = [
      files.read({ path: "big" }, { signal: holding.signal })[Symbol.asyncIterator](),
      files.read({ path: "big" }, { signal: holding.signal })[Symbol.asyncIterator](),
    ];
    for (const holder of holders) expect((await holder.next()).value.event.case).toBe("stat");
    expectReason(await streamError(files.read({ path: "file.txt" })), {
      code: Code.ResourceExhausted,
      reason: "LIMIT_EXCEEDED",
      metadata: { limit: "max-transfers-per-connection", value: "2" },
    });
    expectReason(await rpcError(writeFile(files, "w.txt", "x")), {
      code: Code.ResourceExhausted,
      reason: "LIMIT_EXCEEDED",
      metadata: { limit: "max-transfers-per-connection", value: "2" },
    });
    // Another connection has transfers of its own.
    const other = t.connect(FileService);
    expect((await other.stat({ path: "file.txt" })).stat?.sizeBytes).toBe(7n);
    holding.abort();
    // Cancelled, the reads give their slots back.
    await waitFor(
      () =>
        files
          .stat({ path: "file.txt" })
          .then(() => writeFile(files, "w.txt", "x"))
          .then(
            () => true,
            () => false,
          ),
      { what: "the transfer slots to be free" },
    );
    const watching = new AbortController();
    const watch = files.watch({ path: "dir" }, { signal: watching.signal })[Symbol.asyncIterator]();
    expect((await watch.next()).value.event.case).toBe("started");
    expectReason(await streamError(files.watch({ path: "." })), {
      code: Code.ResourceExhausted,
      reason: "LIMIT_EXCEEDED",
      metadata: { limit: "max-watches-per-connection", value: "1" },
    });
    watching.abort();
    await waitFor(
      async () => {
        const again = new AbortController();
        try {
          return (
            (await files.watch({ path: "dir" }, { signal: again.signal })[Symbol.asyncIterator]().next()).value?.event
              .case === "started"
          );
        } catch {
          return false;
        } finally {
          again.abort();
        }
      },
      { what: "the watch slot to be free" },
    );
  });
});

describe.skipIf(!isRoot)(
  "the reasons of filesystems and users (root: a tmpfs, a read-only mount, an unprivileged user)",
  () => {
    it("STORAGE_EXHAUSTED when the disk fills mid-write, and the old file is intact", async () => {
      const target = path.join(small!, "data.bin");
      await writeFile(files, target, "the old content");
      const error = await rpcError(writeFile(files, target, Buffer.alloc(4 * 1024 * 1024, 1)));
      expectReason(error, {
        code: Code.ResourceExhausted,
        reason: "STORAGE_EXHAUSTED",
        metadata: { path: target, errno: "ENOSPC" },
      });
      const { data } = await import("./support/files.js").then(({ readFile }) => readFile(files, target));
      expect(data.toString()).toBe("the old content");
      // Refused before the first byte when the header says how large: the space is reserved first.
      expectReason(await rpcError(files.write(writeParts({ path: target, expectedSizeBytes: 8n * 1024n * 1024n }))), {
        code: Code.ResourceExhausted,
        reason: "STORAGE_EXHAUSTED",
        metadata: { path: target, errno: "ENOSPC" },
      });
      expect((await files.list({ path: small! })).entries.map((entry) => entry.name)).toEqual(["data.bin"]);
    });

    it("CROSS_DEVICE for a move between two filesystems", async () => {
      const destination = path.join(small!, "moved.txt");
      expectReason(await rpcError(files.move({ source: "file.txt", destination })), {
        code: Code.FailedPrecondition,
        reason: "CROSS_DEVICE",
        metadata: { source: "file.txt", destination },
      });
    });

    it("READ_ONLY_FILESYSTEM for a write on a read-only mount", async () => {
      const target = path.join(readOnly!, "x");
      expectReason(await rpcError(writeFile(files, target, "x")), {
        code: Code.FailedPrecondition,
        reason: "READ_ONLY_FILESYSTEM",
        metadata: { path: target },
      });
    });

    it("FILE_BUSY for the removal of a mount point", async () => {
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", path.join(workspace, "mounted")]);
      try {
        expectReason(await rpcError(files.remove({ path: "mounted" })), {
          code: Code.FailedPrecondition,
          reason: "FILE_BUSY",
          metadata: { path: "mounted", errno: "EBUSY" },
        });
      } finally {
        execFileSync("umount", ["-l", path.join(workspace, "mounted")]);
      }
    });

    it("PATH_NOT_ACCESSIBLE for what the --user user may not read, where the root daemon could", async () => {
      const token = "files-errors-token";
      const asNobody = await startTestServer({ runAs: resolveUser("nobody"), token });
      try {
        chmodSync(asNobody.workspace, 0o755);
        writeFileSync(path.join(asNobody.workspace, "private"), "root's", { mode: 0o600 });
        const client = asNobody.connect(FileService, { token });
        expectReason(await streamError(client.read({ path: "private" })), {
          code: Code.PermissionDenied,
          reason: "PATH_NOT_ACCESSIBLE",
          metadata: { path: "private", errno: "EACCES" },
        });
        expectReason(await rpcError(client.chmod({ path: "private", mode: 0o644 })), {
          code: Code.PermissionDenied,
          reason: "PATH_NOT_ACCESSIBLE",
          metadata: { path: "private", errno: "EPERM" },
        });
      } finally {
        await asNobody.close();
      }
    });
  },
);

describe("FILE_SERVICE_UNAVAILABLE", () => {
  it("a daemon without its addon cannot watch, and says so (it still reads and writes)", async () => {
    const workspace = mkdtempSync(path.join(os.tmpdir(), "files-no-addon-"));
    const daemon = await startDaemonProcess(["--workspace", workspace], {
      file: process.execPath,
      args: ["--import", "tsx", "src/cli/sandboxd.ts"],
      env: { ...process.env, SANDBOXD_NO_ADDON: "1" },
    });
    try {
      const client = createClient(FileService, createGrpcTransport({ baseUrl: daemon.url }));
      expectReason(await streamError(client.watch({ path: "." })), {
        code: Code.FailedPrecondition,
        reason: "FILE_SERVICE_UNAVAILABLE",
        metadata: { path: "." },
      });
      expect((await writeFile(client, "works.txt", "yes")).sizeBytes).toBe(3n);
    } finally {
      daemon.child.kill("SIGTERM");
      await daemon.exited();
      rmSync(workspace, { recursive: true, force: true });
    }
  });
});
