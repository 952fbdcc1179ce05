/**
 * The file service's door: sandbox.v1.FileService on the file domain, the REST surface of
 * KEP-539.2 (`/v1/files/...`) on the same domain, and the limits and metrics both share.
 *
 * @module
 */
export { createFileService, type FileServiceOptions } from "./file-service.js";
export { createFileMetrics, type FileMetrics } from "./metrics.js";
export {
  defaultMaxTransfers,
  defaultMaxTransfersPerConnection,
  defaultMaxWatchesPerConnection,
  FileLimits,
  type FileLimitOptions,
  type FileSlot,
} from "./limits.js";
export { createFilesRest, filesRestPrefix, type FilesRest, type FilesRestOptions } from "./rest.js";
