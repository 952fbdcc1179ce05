import { createHash, type Hash } from "node:crypto";
import { constants as fsConstants, writev } from "node:fs";
import path from "node:path";
import { errnoOf, FileError, fileErrorOf } from "./errors.js";
import { fileStatOf, type FileStat } from "./file-stat.js";
import type { Location } from "./resolve.js";
import type { FilesContext } from "./context.js";
import { newTemporaryName } from "./temporaries.js";

/** Default permission bits of a new file. */
export const defaultFileMode = 0o644;
/**
 * Bytes gathered before one write to the file. While one such batch is being written (on a thread
 * of libuv's pool), the next is gathered: an upload holds at most two batches and the piece in hand.
 */
const flushBytes = 1024 * 1024;

/** Where and how to write a file. */
export interface WriteHeader {
  /** The file to create or replace; a symlink there is replaced, never written through. */
  path: string;
  /** Permission bits, exactly; an existing file's are kept when undefined, else {@link defaultFileMode}. */
  mode?: number;
  /** Create missing parent directories (0755). */
  createParents?: boolean;
  /** Refuse when something exists at `path` (checked atomically at the rename). */
  failIfExists?: boolean;
  /** The upload must be exactly this many bytes. */
  expectedSizeBytes?: number;
  /** The upload's SHA-256 in hex; empty or undefined for no check. */
  expectedSha256?: string;
}

/**
 * FileWriter takes the bytes of one write, in order, into a temporary file beside the target, and
 * renames it into place at {@link commit}: a reader sees the old file or the new one, never half of
 * one. {@link abort} (or any failure: a full disk, a size or digest mismatch) removes the temporary
 * file and leaves the old file as it was. Writes behind: each `write` resolves once its bytes are
 * gathered and at most one earlier batch (1 MiB) is still being written, so a caller that awaits it
 * reads its source while the disk takes the previous batch, and no faster than the disk takes them.
 * A failed batch write fails the next `write` or the `commit`.
 */
export interface FileWriter {
  /** The target, as answers show it. */
  readonly path: string;
  /** Bytes taken so far. */
  readonly bytesWritten: number;
  /** Takes the next bytes. */
  write(data: Uint8Array): Promise<void>;
  /**
   * Checks the size and digest, puts the file in place and resolves with its stat. A `signal`
   * aborted before the rename (the last moment a cancel can stop the write) gives the write up
   * instead and rejects with the signal's reason: a client that cancels right after its last bytes
   * does not get its file put in place.
   */
  commit(signal?: AbortSignal): Promise<FileStat>;
  /** Gives up: removes the temporary file. Idempotent; a no-op after commit. */
  abort(): Promise<void>;
}

/**
 * Creates a {@link FileWriter}: resolves the parent (creating it with `createParents`, through
 * `makeParents`), checks what is at the target, and creates the temporary file with the identity's
 * rights (so it belongs to the `--user` user). Throws a FileError.
 */
export async function createFileWriter(
  context: FilesContext,
  header: WriteHeader,
  makeParents: (location: Location, mode: number) => Promise<boolean>,
): Promise<FileWriter> {
  const { resolver, calls, names } = context;
  const requested = header.path;
  const location = resolver.locate(requested);
  if (resolver.isRoot(location))
    throw new FileError(`is a directory: ${requested}`, "IS_A_DIRECTORY", { metadata: { path: requested } });
  if (header.mode !== undefined && (!Number.isInteger(header.mode) || header.mode < 0 || header.mode > 0o7777)) {
    throw new FileError(`mode must be at most 07777, got ${header.mode}`, "INVALID_ARGUMENT", {
      metadata: { field: "mode" },
    });
  }
  const expectedSha256 = header.expectedSha256?.toLowerCase() || undefined;
  if (expectedSha256 !== undefined && !/^[0-9a-f]{64}$/.test(expectedSha256)) {
    throw new FileError("expected_sha256 must be 64 hex characters", "INVALID_ARGUMENT", {
      metadata: { field: "expected_sha256" },
    });
  }
  let parent: { dir: number; name: string };
  try {
    parent = await resolver.openParent(location);
  } catch (error) {
    if (!header.createParents || !(error instanceof FileError) || error.reason !== "PATH_NOT_FOUND") throw error;
    const above = path.posix.dirname(location.relative);
    await makeParents(
      { ...location, relative: above === "." ? "" : above, display: path.posix.dirname(location.display) },
      0o755,
    );
    parent = await resolver.openParent(location);
  }
  const { dir, name } = parent;
  let fd = -1;
  let temporary = "";
  try {
    let mode = header.mode ?? defaultFileMode;
    const existing = await calls.stat(dir, name).catch((error: unknown) => {
      if (errnoOf(error) === "ENOENT") return undefined;
      throw error;
    });
    if (existing !== undefined) {
      const kind = existing.mode & fsConstants.S_IFMT;
      if (kind === fsConstants.S_IFDIR)
        throw new FileError(`is a directory: ${requested}`, "IS_A_DIRECTORY", { metadata: { path: requested } });
      if (header.failIfExists)
        throw new FileError(`already exists: ${requested}`, "PATH_ALREADY_EXISTS", { metadata: { path: requested } });
      if (kind !== fsConstants.S_IFREG && kind !== fsConstants.S_IFLNK) {
        const type = fileStatOf(location.display, existing, names).kind.toUpperCase().replace("-", "_");
        throw new FileError(`not a regular file: ${requested}`, "NOT_A_REGULAR_FILE", {
          metadata: { path: requested, type },
        });
      }
      if (header.mode === undefined && kind === fsConstants.S_IFREG) mode = existing.mode & 0o7777;
    }
    temporary = newTemporaryName();
    fd = await calls.openAt(
      dir,
      temporary,
      fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW,
      0o600,
    );
    if (header.expectedSizeBytes !== undefined) await calls.allocate(fd, header.expectedSizeBytes);
    return new TemporaryFileWriter(
      context,
      location,
      dir,
      name,
      temporary,
      fd,
      mode,
      header,
      expectedSha256,
      existing !== undefined,
    );
  } catch (error) {
    if (fd >= 0) await calls.close(fd);
    if (temporary !== "") await calls.unlink(dir, temporary, false).catch(() => {});
    await calls.close(dir);
    throw fileErrorOf(error, requested);
  }
}

type WriterState = { kind: "open" } | { kind: "committed" } | { kind: "aborted" };

class TemporaryFileWriter implements FileWriter {
  private state: WriterState = { kind: "open" };
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  /** Bytes the kernel took. */
  private written = 0;
  /** Bytes of the batch being written. */
  private writingBytes = 0;
  /** The batch being written: settles once it is written or has failed (never rejects). */
  private writing: Promise<void> | undefined;
  /** Why the last batch failed, for the next write or the commit to throw. */
  private failure: { error: unknown } | undefined;
  private readonly hash: Hash | undefined;
  private fdOpen = true;

  constructor(
    private readonly context: FilesContext,
    private readonly location: Location,
    private readonly dir: number,
    private readonly name: string,
    private readonly temporary: string,
    private readonly fd: number,
    private readonly mode: number,
    private readonly header: WriteHeader,
    private readonly expectedSha256: string | undefined,
    /** Whether something was at the target when the write began. */
    private readonly replacing: boolean,
  ) {
    this.hash = expectedSha256 === undefined ? undefined : createHash("sha256");
  }

  get path(): string {
    return this.location.display;
  }

  get bytesWritten(): number {
    return this.written + this.writingBytes + this.pendingBytes;
  }

  async write(data: Uint8Array): Promise<void> {
    if (this.state.kind !== "open") throw new Error(`write after ${this.state.kind}`);
    if (data.length === 0) return;
    const expected = this.header.expectedSizeBytes;
    if (expected !== undefined && this.bytesWritten + data.length > expected) {
      await this.abort();
      throw this.mismatch("expected_size_bytes", String(expected), `more than ${expected}`);
    }
    this.hash?.update(data);
    this.pending.push(data);
    this.pendingBytes += data.length;
    if (this.pendingBytes < flushBytes) return;
    // One batch written at a time (the fd's offset orders them); this one waits for the last.
    await this.settled();
    this.writeBehind();
  }

  async commit(signal?: AbortSignal): Promise<FileStat> {
    if (this.state.kind !== "open") throw new Error(`commit after ${this.state.kind}`);
    const { calls, names } = this.context;
    const requested = this.header.path;
    try {
      await this.settled();
      this.writeBehind();
      await this.settled();
      const expected = this.header.expectedSizeBytes;
      if (expected !== undefined && this.written !== expected)
        throw this.mismatch("expected_size_bytes", String(expected), String(this.written));
      if (this.hash !== undefined) {
        const actual = this.hash.digest("hex");
        if (actual !== this.expectedSha256) throw this.mismatch("expected_sha256", this.expectedSha256!, actual);
      }
      await calls.chmod(this.fd, this.mode);
      await this.closeFile();
      signal?.throwIfAborted();
      this.context.commits.record(this.temporary, this.replacing);
      await calls.rename(this.dir, this.temporary, this.dir, this.name, this.header.failIfExists ?? false);
      this.state = { kind: "committed" };
      const raw = await calls.stat(this.dir, this.name);
      return fileStatOf(this.location.display, raw, names);
    } catch (error) {
      await this.abort();
      throw fileErrorOf(error, requested);
    } finally {
      if (this.state.kind === "committed") await calls.close(this.dir);
    }
  }

  async abort(): Promise<void> {
    if (this.state.kind !== "open") return;
    this.state = { kind: "aborted" };
    const { calls } = this.context;
    this.pending = [];
    this.pendingBytes = 0;
    // A batch being written holds the fd: it is closed after, so its number is never reused under it.
    await this.writing;
    await this.closeFile();
    await calls.unlink(this.dir, this.temporary, false).catch(() => {});
    await calls.close(this.dir);
  }

  private async closeFile(): Promise<void> {
    if (!this.fdOpen) return;
    this.fdOpen = false;
    await this.context.calls.close(this.fd);
  }

  /** Starts writing what is gathered, if anything; the batch before must be done. */
  private writeBehind(): void {
    if (this.pendingBytes === 0) return;
    const chunks = this.pending;
    const bytes = this.pendingBytes;
    this.pending = [];
    this.pendingBytes = 0;
    this.writingBytes = bytes;
    this.writing = writeAll(this.fd, chunks).then(
      () => {
        this.written += bytes;
        this.writingBytes = 0;
      },
      (error: unknown) => {
        this.writingBytes = 0;
        this.failure = { error };
      },
    );
  }

  /** Waits for the batch being written; throws (after removing the temporary file) if a batch failed. */
  private async settled(): Promise<void> {
    await this.writing;
    this.writing = undefined;
    if (this.failure === undefined) return;
    await this.abort();
    throw fileErrorOf(this.failure.error, this.header.path);
  }

  private mismatch(field: string, expected: string, actual: string): FileError {
    return new FileError(
      `the upload does not match ${field}: expected ${expected}, got ${actual}`,
      "CONTENT_MISMATCH",
      {
        metadata: { path: this.header.path, field, expected, actual },
      },
    );
  }
}

/** writev until every byte of `chunks` is written. */
async function writeAll(fd: number, chunks: Uint8Array[]): Promise<void> {
  let rest = chunks;
  while (rest.length > 0) {
    let count = await new Promise<number>((resolve, reject) =>
      writev(fd, rest, (error, written) => (error ? reject(error) : resolve(written))),
    );
    const left: Uint8Array[] = [];
    for (const chunk of rest) {
      if (count >= chunk.length) count -= chunk.length;
      else {
        left.push(chunk.subarray(count));
        count = 0;
      }
    }
    rest = left;
  }
}
