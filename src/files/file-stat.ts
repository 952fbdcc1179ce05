import { constants as fsConstants, readFileSync, statSync } from "node:fs";
import path from "node:path";
import type { RawStat } from "./native-calls.js";

/** What kind of entry a path names. */
export type FileKind = "file" | "directory" | "symlink" | "fifo" | "socket" | "character-device" | "block-device";

/** One directory entry as the file service describes it (lstat's view: a symlink is a symlink). */
export interface FileStat {
  /** Absolute path, symlinks of the request as written. */
  path: string;
  /** The last component of `path`. */
  name: string;
  /** What kind of entry it is. */
  kind: FileKind;
  /** Size in bytes (a symlink's: the length of its target). */
  sizeBytes: number;
  /** Permission bits with setuid, setgid and sticky (07777 at most). */
  mode: number;
  /** Owner's uid. */
  uid: number;
  /** Owner's gid. */
  gid: number;
  /** Owner's user name; empty when the uid has none here. */
  owner: string;
  /** Owner's group name; empty when the gid has none here. */
  group: string;
  /** Last content modification, seconds since the epoch. */
  modifiedSeconds: number;
  /** Last content modification, nanoseconds within the second. */
  modifiedNanos: number;
  /** A symlink's target as written in it. */
  symlinkTarget?: string;
}

/** The kind of an st_mode. */
export function kindOf(mode: number): FileKind {
  switch (mode & fsConstants.S_IFMT) {
    case fsConstants.S_IFDIR:
      return "directory";
    case fsConstants.S_IFLNK:
      return "symlink";
    case fsConstants.S_IFIFO:
      return "fifo";
    case fsConstants.S_IFSOCK:
      return "socket";
    case fsConstants.S_IFCHR:
      return "character-device";
    case fsConstants.S_IFBLK:
      return "block-device";
    default:
      return "file";
  }
}

/** Builds the {@link FileStat} of the entry at absolute path `display` from what the kernel said. */
export function fileStatOf(
  display: string,
  raw: RawStat,
  names: OwnerNames,
  symlinkTarget?: string,
  name = path.posix.basename(display),
): FileStat {
  const kind = kindOf(raw.mode);
  const stat: FileStat = {
    path: display,
    name,
    kind,
    sizeBytes: raw.size,
    mode: raw.mode & 0o7777,
    uid: raw.uid,
    gid: raw.gid,
    owner: names.user(raw.uid),
    group: names.group(raw.gid),
    modifiedSeconds: raw.mtimeSeconds,
    modifiedNanos: raw.mtimeNanos,
  };
  const target = symlinkTarget ?? raw.link;
  if (kind === "symlink" && target !== undefined) stat.symlinkTarget = target;
  return stat;
}

/** Names of users and groups by id, for listings. */
export interface OwnerNames {
  /** The user name of `uid`, empty when it has none. */
  user(uid: number): string;
  /** The group name of `gid`, empty when it has none. */
  group(gid: number): string;
}

/** How often the databases are looked at again for a change, at most, in milliseconds. */
const recheckMs = 2000;

/**
 * Creates {@link OwnerNames} read from /etc/passwd and /etc/group, read again when they change (a
 * user added while the daemon runs gets a name). Users only an NSS source (LDAP) knows have no name
 * here: a listing of 10,000 entries cannot afford a lookup each.
 */
export function createOwnerNames(passwdFile = "/etc/passwd", groupFile = "/etc/group"): OwnerNames {
  const table = (file: string) => {
    let names = new Map<number, string>();
    let version = "";
    let checked = -Infinity;
    return (id: number): string => {
      const now = performance.now();
      if (now - checked >= recheckMs || (!names.has(id) && now - checked >= 100)) {
        checked = now;
        try {
          const info = statSync(file);
          const current = `${info.mtimeMs}:${info.size}:${info.ino}`;
          if (current !== version) {
            version = current;
            names = new Map();
            for (const line of readFileSync(file, "utf8").split("\n")) {
              const [name, , number] = line.split(":");
              if (name !== undefined && number !== undefined && /^\d+$/.test(number) && !names.has(Number(number)))
                names.set(Number(number), name);
            }
          }
        } catch {
          // No database: ids without names.
        }
      }
      return names.get(id) ?? "";
    };
  };
  const user = table(passwdFile);
  const group = table(groupFile);
  return { user, group };
}
