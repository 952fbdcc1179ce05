import type { ErrorReasonName } from "../shared/error-reasons.js";

/**
 * Why a file operation was refused: the names of sandbox.v1's `ErrorReason` values (without their
 * `ERROR_REASON_` prefix) that the file domain gives, picked from the generated enum. The RPC layer
 * sends the reason as it is, in a `google.rpc.ErrorInfo`, and maps it to a status code in one table;
 * this module knows nothing of RPC.
 */
export type FileErrorReason = Extract<
  ErrorReasonName,
  | "PATH_NOT_FOUND"
  | "PATH_ALREADY_EXISTS"
  | "PATH_OUTSIDE_WORKSPACE"
  | "PATH_NOT_ACCESSIBLE"
  | "IS_A_DIRECTORY"
  | "NOT_A_DIRECTORY"
  | "DIRECTORY_NOT_EMPTY"
  | "NOT_A_REGULAR_FILE"
  | "STORAGE_EXHAUSTED"
  | "CONTENT_MISMATCH"
  | "CROSS_DEVICE"
  | "WORKSPACE_ROOT"
  | "READ_ONLY_FILESYSTEM"
  | "SYMLINK_LOOP"
  | "FILE_BUSY"
  | "FILE_SERVICE_UNAVAILABLE"
  | "INVALID_ARGUMENT"
  | "LIMIT_EXCEEDED"
>;

/** Options for {@link FileError}. */
export interface FileErrorOptions {
  /** Facts a caller can act on, by name (`path`, `errno`, `field`...), as ErrorInfo metadata. */
  metadata?: Readonly<Record<string, string>>;
  /** The error that caused this one. */
  cause?: unknown;
}

/** FileError is a refused file operation, with a reason and facts a caller can act on. */
export class FileError extends Error {
  /** Facts about the refusal, by name; empty when there are none. */
  readonly metadata: Readonly<Record<string, string>>;

  /** Creates an error; `message` is lowercase with no trailing period. */
  constructor(
    message: string,
    readonly reason: FileErrorReason,
    options: FileErrorOptions = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "FileError";
    this.metadata = options.metadata ?? {};
  }
}

/** The errno name of a system call's failure (`ENOENT`), or undefined for anything else. */
export function errnoOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && code.startsWith("E") ? code : undefined;
}

/**
 * Turns a system call's failure on `path` (as the caller wrote it) into the FileError a client can
 * branch on; a failure with no file meaning (EIO, EBADF...) is returned unchanged, for the RPC layer
 * to report as INTERNAL with its message.
 */
export function fileErrorOf(error: unknown, path: string): unknown {
  if (error instanceof FileError) return error;
  const errno = errnoOf(error);
  const metadata = { path };
  switch (errno) {
    case "ENOENT":
      return new FileError(`no such file or directory: ${path}`, "PATH_NOT_FOUND", { metadata, cause: error });
    case "EEXIST":
      return new FileError(`already exists: ${path}`, "PATH_ALREADY_EXISTS", { metadata, cause: error });
    case "EACCES":
    case "EPERM":
      return new FileError(`permission denied: ${path}`, "PATH_NOT_ACCESSIBLE", {
        metadata: { path, errno },
        cause: error,
      });
    case "EISDIR":
      return new FileError(`is a directory: ${path}`, "IS_A_DIRECTORY", { metadata, cause: error });
    case "ENOTDIR":
      return new FileError(`not a directory: ${path}`, "NOT_A_DIRECTORY", { metadata, cause: error });
    case "ENOTEMPTY":
      return new FileError(`directory not empty: ${path}`, "DIRECTORY_NOT_EMPTY", { metadata, cause: error });
    case "ENOSPC":
    case "EDQUOT":
    case "EFBIG":
      return new FileError(`no space left for ${path} (${errno})`, "STORAGE_EXHAUSTED", {
        metadata: { path, errno },
        cause: error,
      });
    case "EROFS":
      return new FileError(`read-only filesystem: ${path}`, "READ_ONLY_FILESYSTEM", { metadata, cause: error });
    case "ELOOP":
      return new FileError(`too many levels of symbolic links: ${path}`, "SYMLINK_LOOP", { metadata, cause: error });
    case "EBUSY":
    case "ETXTBSY":
      return new FileError(`busy: ${path} (${errno})`, "FILE_BUSY", { metadata: { path, errno }, cause: error });
    case "ENAMETOOLONG":
      return new FileError(`a name in the path is too long: ${path}`, "INVALID_ARGUMENT", {
        metadata: { field: "path" },
        cause: error,
      });
    case "ENXIO":
    case "ESPIPE":
      return new FileError(`not a regular file: ${path}`, "NOT_A_REGULAR_FILE", {
        metadata: { path, type: "OTHER" },
        cause: error,
      });
    default:
      return error;
  }
}
