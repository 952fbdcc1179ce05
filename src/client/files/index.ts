/**
 * The client's file room: {@link SandboxFiles} (`sandbox.files`) over the sandbox.v1 FileService,
 * with streamed reads that resume, streamed writes that are never retried, listings, and watches.
 *
 * @module
 */
export {
  type FileChangeKind,
  type FileInfo,
  type FileKind,
  permissionsText,
  type WatchEndKind,
  type WatchOverflowKind,
} from "./file-info.js";
export type { FilesContext } from "./files-context.js";
export { FileChangedError, ReadLimitError, type ReadProgress, type ReadRangeOptions } from "./read.js";
export {
  type DownloadOptions,
  type ListOptions,
  type MkdirOptions,
  type ReadOptions,
  type RemoveOptions,
  type RenameOptions,
  SandboxFiles,
  type SignalOptions,
  type StatOptions,
  type UploadOptions,
} from "./sandbox-files.js";
export {
  type FileChangeEvent,
  FileWatch,
  type FileWatchEvent,
  type WatchOptions,
  type WatchOverflowEvent,
} from "./watch.js";
export type { WriteData, WriteOptions } from "./write.js";
