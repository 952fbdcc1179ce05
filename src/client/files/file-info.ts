import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  FileChangeType,
  FileType,
  type FileInfo as ProtoFileInfo,
  WatchEndReason,
  WatchOverflowSource,
} from "../../../gen/sandbox/v1/files_pb.js";

/** `SOME_NAME` as `some-name`, at the type level. */
type Kebab<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}-${Kebab<Tail>}` : S;

/** The names of a generated enum's values without `UNSPECIFIED`, lower-case and kebab-cased. */
type EnumNames<E extends Record<string, string | number>> = Kebab<
  Lowercase<Exclude<Extract<keyof E, string>, "UNSPECIFIED">>
>;

/** A generated enum value's name, as {@link EnumNames} spells it (`CHARACTER_DEVICE` as `character-device`). */
function enumName<E extends Record<string, string | number>>(values: E, value: number): EnumNames<E> {
  const name = (values as unknown as Record<number, string | undefined>)[value] ?? "UNSPECIFIED";
  return name.toLowerCase().replaceAll("_", "-") as EnumNames<E>;
}

/**
 * FileKind is what a directory entry is: `file`, `directory`, `symlink`, `fifo`, `socket`,
 * `character-device` or `block-device` (sandbox.proto's `FileType`, kebab-cased).
 */
export type FileKind = EnumNames<typeof FileType>;

/**
 * FileInfo describes one directory entry as lstat(2) sees it: E2B's `EntryInfo` (name, type, path,
 * size, mode, owner, group, modifiedTime, symlinkTarget) with its sizes in bytes and its times as
 * Dates. A directory is `directory` here, where E2B says `dir`.
 */
export interface FileInfo {
  /** Absolute path of the entry on the sandbox's machine. */
  path: string;
  /** The last component of `path`. */
  name: string;
  /** What kind of entry it is. */
  type: FileKind;
  /** Size in bytes (for a symlink, the length of its target). */
  size: number;
  /** Permission bits with setuid, setgid and sticky: `0o644` is 420. */
  mode: number;
  /** The mode as `ls -l` writes it after the type letter, such as `rw-r--r--`. */
  permissions: string;
  /** Owner's user id. */
  uid: number;
  /** Owner's group id. */
  gid: number;
  /** Owner's user name; empty when the uid has no name there. */
  owner: string;
  /** Owner's group name; empty when the gid has no name there. */
  group: string;
  /** Last modification of the content. */
  modifiedTime: Date;
  /** For a symlink, what it points to, as written in the link. */
  symlinkTarget?: string;
}

/** A FileInfo from the daemon's message. */
export function fileInfoFromProto(info: ProtoFileInfo): FileInfo {
  return {
    path: info.path,
    name: info.name,
    type: enumName(FileType, info.type),
    size: Number(info.sizeBytes),
    mode: info.mode,
    permissions: permissionsText(info.mode),
    uid: info.uid,
    gid: info.gid,
    owner: info.owner,
    group: info.group,
    modifiedTime: info.modifiedTime === undefined ? new Date(0) : timestampDate(info.modifiedTime),
    ...(info.symlinkTarget === undefined ? {} : { symlinkTarget: info.symlinkTarget }),
  };
}

/** Permission bits as `ls -l` writes them (`rwsr-xr-t` for setuid and sticky). */
export function permissionsText(mode: number): string {
  const triple = (shift: number, special: number, letter: string) => {
    const bits = (mode >> shift) & 7;
    const execute = bits & 1;
    const hasSpecial = (mode & special) !== 0;
    const x = hasSpecial ? (execute ? letter : letter.toUpperCase()) : execute ? "x" : "-";
    return `${bits & 4 ? "r" : "-"}${bits & 2 ? "w" : "-"}${x}`;
  };
  return triple(6, 0o4000, "s") + triple(3, 0o2000, "s") + triple(0, 0o1000, "t");
}

/** What happened to an entry under a watch: sandbox.proto's `FileChangeType`, kebab-cased. */
export type FileChangeKind = EnumNames<typeof FileChangeType>;

/** The name of a change type. */
export function changeKindOf(type: FileChangeType): FileChangeKind {
  return enumName(FileChangeType, type);
}

/** Where a watch lost events: sandbox.proto's `WatchOverflowSource`, kebab-cased. */
export type WatchOverflowKind = EnumNames<typeof WatchOverflowSource>;

/** The name of an overflow source. */
export function overflowKindOf(source: WatchOverflowSource): WatchOverflowKind {
  return enumName(WatchOverflowSource, source);
}

/** Why a watch ended by itself: sandbox.proto's `WatchEndReason`, kebab-cased. */
export type WatchEndKind = EnumNames<typeof WatchEndReason>;

/** The name of an end reason. */
export function endKindOf(reason: WatchEndReason): WatchEndKind {
  return enumName(WatchEndReason, reason);
}
