export { errnoOf, FileError, fileErrorOf, type FileErrorOptions, type FileErrorReason } from "./errors.js";
export { createOwnerNames, kindOf, type FileKind, type FileStat, type OwnerNames } from "./file-stat.js";
export { createFileCalls, type FileCalls, type FileCallsOptions, type FileIdentity } from "./native-calls.js";
export { defaultReadChunkBytes, type FileReader, type ReadEvent, type ReadLimit, type ReadOptions } from "./read.js";
export { PathResolver, type Location, type WorkspaceRoot } from "./resolve.js";
export {
  defaultMaxQueuedWatchEvents,
  defaultMaxWatchedDirectories,
  type FileChangeKind,
  type FileWatch,
  type WatchEvent,
  type WatchOptions,
} from "./watch.js";
export {
  defaultDirectoryMode,
  defaultEntriesPageSize,
  defaultMaxUnsizedReadBytes,
  maxListDepth,
  maxEntriesPageSize,
  WorkspaceFiles,
  type ListOptions,
  type ListPage,
  type WorkspaceFilesOptions,
} from "./workspace-files.js";
export { defaultFileMode, type FileWriter, type WriteHeader } from "./write.js";
