import type { MessageInitShape } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import {
  FileChangeType,
  FileInfoSchema,
  FileType,
  ReadLimit,
  WatchEndReason,
  WatchOverflowSource,
  type FileInfo,
  type ReadResponseSchema,
  type WatchResponseSchema,
} from "../../../gen/sandbox/v1/files_pb.js";
import type { FileChangeKind, FileKind, FileStat, ReadEvent, WatchEvent } from "../../files/index.js";

const fileTypes: Record<FileKind, FileType> = {
  file: FileType.FILE,
  directory: FileType.DIRECTORY,
  symlink: FileType.SYMLINK,
  fifo: FileType.FIFO,
  socket: FileType.SOCKET,
  "character-device": FileType.CHARACTER_DEVICE,
  "block-device": FileType.BLOCK_DEVICE,
};

const changeTypes: Record<FileChangeKind, FileChangeType> = {
  create: FileChangeType.CREATE,
  write: FileChangeType.WRITE,
  remove: FileChangeType.REMOVE,
  rename: FileChangeType.RENAME,
  attribute: FileChangeType.ATTRIBUTE,
};

/**
 * The `FileInfo` of a stat. Built as the message itself (every field given, checked by its generated
 * type), which protobuf-es takes as it is: `create()` would copy each of a listing's 10,000 entries
 * and their timestamps field by field again.
 */
export function toProtoFileInfo(stat: FileStat): FileInfo {
  const info: FileInfo = {
    $typeName: FileInfoSchema.typeName,
    path: stat.path,
    name: stat.name,
    type: fileTypes[stat.kind],
    sizeBytes: BigInt(stat.sizeBytes),
    mode: stat.mode,
    uid: stat.uid,
    gid: stat.gid,
    owner: stat.owner,
    group: stat.group,
    modifiedTime: {
      $typeName: TimestampSchema.typeName,
      seconds: BigInt(stat.modifiedSeconds),
      nanos: stat.modifiedNanos,
    },
  };
  if (stat.symlinkTarget !== undefined) info.symlinkTarget = stat.symlinkTarget;
  return info;
}

/** The `ReadResponse` of a read event after the stat. */
export function toProtoReadEvent(event: ReadEvent): MessageInitShape<typeof ReadResponseSchema> {
  switch (event.kind) {
    case "chunk":
      return { event: { case: "chunk", value: { offset: BigInt(event.offset), data: event.data } } };
    case "limit": {
      const limit =
        event.limit === "length"
          ? ReadLimit.LENGTH
          : event.limit === "size-at-open"
            ? ReadLimit.SIZE_AT_OPEN
            : ReadLimit.MAX_UNSIZED_READ_BYTES;
      return { event: { case: "limitReached", value: { limit, limitBytes: BigInt(event.limitBytes) } } };
    }
    case "end":
      return {
        event: {
          case: "end",
          value: { bytesRead: BigInt(event.bytesRead), endOffset: BigInt(event.endOffset), eof: event.eof },
        },
      };
  }
}

/** The `WatchResponse` of a watch event. */
export function toProtoWatchEvent(event: WatchEvent): MessageInitShape<typeof WatchResponseSchema> {
  switch (event.kind) {
    case "started":
      return {
        event: {
          case: "started",
          value: { stat: toProtoFileInfo(event.stat), watchedDirectories: event.watchedDirectories },
        },
      };
    case "change":
      return {
        event: {
          case: "change",
          value: {
            type: changeTypes[event.change],
            path: event.path,
            oldPath: event.oldPath,
            isDirectory: event.isDirectory,
          },
        },
      };
    case "overflow": {
      const source =
        event.source === "kernel"
          ? WatchOverflowSource.KERNEL
          : event.source === "client"
            ? WatchOverflowSource.CLIENT
            : WatchOverflowSource.WATCH_LIMIT;
      return { event: { case: "overflow", value: { source, lostEvents: BigInt(event.lostEvents), path: event.path } } };
    }
    case "ended": {
      const reason =
        event.reason === "unmounted"
          ? WatchEndReason.UNMOUNTED
          : event.reason === "directory-moved"
            ? WatchEndReason.DIRECTORY_MOVED
            : WatchEndReason.DIRECTORY_REMOVED;
      return { event: { case: "ended", value: { reason } } };
    }
  }
}
