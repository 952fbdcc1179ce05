import {
  closeSync,
  constants as fsConstants,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import path from "node:path";
import { processExists } from "../../shared/process-exists.js";

const ownStartTime = processStartTime(process.pid);
/** The process group of the daemon itself: never a target. */
const ownGroup = Number(readStat(process.pid)?.[2] ?? process.pid);

/** What {@link GroupLedger.reapLeftovers} did. */
export interface ReapReport {
  /** Process groups of a previous daemon that were still running and have been sent SIGKILL. */
  killedGroups: number[];
  /** Records whose group was gone, whose leader's pid now belongs to another process, or from another boot. */
  staleRecords: number;
  /** Files that were not valid records (planted, truncated, naming the daemon or init): removed, nothing killed. */
  invalidRecords: number;
  /**
   * The processes of a previous daemon that this one found recorded, killed or already gone: what the
   * records say of each, so the new daemon can report them (it cannot tell how they ended).
   */
  lost: LostProcess[];
}

/** What a record says of the process it was written for (see {@link GroupRecordDetails}). */
export interface LostProcess extends GroupRecordDetails {
  /** The process id the previous daemon gave it. */
  processId: string;
  /** Its process group (its leader's pid). */
  pgid: number;
  /** Whether its group still ran and this daemon killed it (SIGKILL); false when it was already gone. */
  killed: boolean;
}

/** What a record keeps of a process besides its group, so a later daemon can say what it was. */
export interface GroupRecordDetails {
  /** Its command as given (cut at 256 characters). */
  command: string;
  /** Its arguments, as many as fit in 256 characters together. */
  args: string[];
  /** Its session; empty for none (cut at 256 characters). */
  sessionId: string;
  /** Its working directory (cut at 1,024 characters). */
  cwd: string;
  /** When it started, in milliseconds since the epoch; 0 when not known. */
  startedAtMs: number;
  /** Whether it ran in a PTY. */
  pty: boolean;
  /** Whether it had a stdin to write to. */
  acceptsInput: boolean;
}

/**
 * Bytes reserved for one record. Its strings are cut (process id, command, arguments and session at 256
 * characters each, cwd at 1,024), which fits unless many are characters JSON escapes or UTF-8 makes long;
 * such a record is kept without its details (see {@link GroupRecordDetails}).
 */
const recordBytes = 4096;
let nextReservation = 0;

/** The record of a group about to start, reserved on disk by {@link GroupLedger.reserve}. */
export interface GroupReservation {
  /**
   * Writes the record of the started group (`pid` is its leader) into the reserved room, with what a
   * later daemon may tell of it. Throws when it cannot.
   */
  commit(pid: number, processId: string, details?: Partial<GroupRecordDetails>): void;
  /** Gives the room back: nothing was started. */
  cancel(): void;
}

/** One group as a record file holds it. */
interface GroupRecord {
  pgid: number;
  /** Kernel start time of the leader (pid = pgid), clock ticks since boot. */
  startTime: number;
  /** /proc/sys/kernel/random/boot_id when recorded: start times count from that boot. */
  bootId: string;
  processId: string;
  daemonPid: number;
  daemonStartTime: number;
  /** Absent in records of daemons before it was kept. */
  details?: GroupRecordDetails;
}

/**
 * GroupLedger records every process group the daemon starts in a state directory, one file per
 * group holding its pgid, the kernel start time of its leader and the boot id, and forgets it when
 * the group has exited. A daemon killed with SIGKILL cannot kill its children; the next daemon
 * started on the same state directory calls {@link reapLeftovers} first and kills every recorded
 * group whose leader still runs: the same pid with exactly the recorded start time in the same
 * boot, which a process that merely reused the pid cannot have. A group whose leader is gone is left
 * to the cgroup sweep (see `PidsCgroup`), since its pgid alone cannot tell it from a reuse.
 *
 * The directory must belong to the daemon's user and be writable by nobody else (it is created
 * 0700 when missing); record files are opened without following symlinks and every record is
 * validated before it is acted on.
 */
export class GroupLedger {
  private readonly bootId = readBootId();

  /**
   * Creates the state directory (mode 0700) when missing. Throws an Error when it is not a
   * directory, belongs to another user, or is writable by group or others.
   */
  constructor(readonly directory: string) {
    mkdirSync(directory, { recursive: true, mode: 0o700 });
    const stat = lstatSync(directory);
    if (!stat.isDirectory()) throw new Error(`state directory ${directory} is not a directory (a symlink?)`);
    const uid = process.getuid?.();
    if (uid !== undefined && stat.uid !== uid) {
      throw new Error(`state directory ${directory} belongs to uid ${stat.uid}, not to the daemon's user (uid ${uid})`);
    }
    if ((stat.mode & 0o022) !== 0) {
      throw new Error(
        `state directory ${directory} has mode ${(stat.mode & 0o777).toString(8).padStart(4, "0")}: it must not be writable by group or others (chmod 700 ${directory})`,
      );
    }
  }

  /**
   * Reserves the record of a group about to be started: a file with room for the record, written
   * before anything is spawned, so a full disk refuses the start instead of leaving a group running
   * unrecorded. Throws an Error (ENOSPC, EDQUOT...) when it cannot be written.
   */
  reserve(): GroupReservation {
    // Not a .json name: a record only once renamed, read by reapLeftovers as pending until then.
    const pending = path.join(this.directory, `pending.${process.pid}.${nextReservation++}.record`);
    const fd = openSync(
      pending,
      fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW,
      0o600,
    );
    try {
      writeSync(fd, " ".repeat(recordBytes));
    } catch (error) {
      closeSync(fd);
      removeQuietly(pending);
      throw error;
    }
    let open = true;
    const close = () => {
      if (open) closeSync(fd);
      open = false;
    };
    return {
      commit: (pid, processId, details) => {
        try {
          const startTime = processStartTime(pid);
          if (startTime === undefined) return; // Gone already: nothing to leave behind.
          const record: GroupRecord = {
            pgid: pid,
            startTime,
            bootId: this.bootId,
            processId: processId.slice(0, 256),
            daemonPid: process.pid,
            daemonStartTime: ownStartTime ?? 0,
            details: cutDetails(details ?? {}),
          };
          // Written over the room reserved: no new block is needed, so a disk that filled meanwhile cannot fail it.
          let text = JSON.stringify(record).padEnd(recordBytes, " ");
          if (Buffer.byteLength(text) > recordBytes) text = JSON.stringify({ ...record, details: undefined });
          text = text.padEnd(recordBytes, " ");
          if (Buffer.byteLength(text) > recordBytes) throw new Error("record too long");
          writeSync(fd, text, 0);
          close();
          renameSync(pending, this.file(pid));
        } finally {
          close();
          removeQuietly(pending);
        }
      },
      cancel: () => {
        close();
        removeQuietly(pending);
      },
    };
  }

  /** Records a started group at once (see {@link reserve}); `pid` is its leader and pgid. Throws when it cannot. */
  record(pid: number, processId: string, details?: Partial<GroupRecordDetails>): void {
    this.reserve().commit(pid, processId, details);
  }

  /** Forgets a group once it has exited. */
  forget(pid: number): void {
    try {
      unlinkSync(this.file(pid));
    } catch {
      // Never recorded, or already forgotten.
    }
  }

  /**
   * Kills (SIGKILL) every recorded group whose leader still runs, as recorded, and clears the
   * ledger. Call before starting anything.
   */
  reapLeftovers(): ReapReport {
    const report: ReapReport = { killedGroups: [], staleRecords: 0, invalidRecords: 0, lost: [] };
    const lost = (record: GroupRecord, killed: boolean) => {
      if (record.processId === "") return;
      report.lost.push({
        ...(record.details ?? {
          command: "",
          args: [],
          sessionId: "",
          cwd: "",
          startedAtMs: 0,
          pty: false,
          acceptsInput: false,
        }),
        processId: record.processId,
        pgid: record.pgid,
        killed,
      });
    };
    for (const entry of readdirSync(this.directory)) {
      const pendingOwner = /^pending\.(\d+)\.\d+\.record$/.exec(entry);
      if (!entry.endsWith(".json") && pendingOwner === null) continue;
      // A reservation of a daemon still running is its business; a dead one's may hold a record
      // written just before the rename.
      if (pendingOwner !== null && Number(pendingOwner[1]) !== process.pid && processExists(Number(pendingOwner[1])))
        continue;
      const file = path.join(this.directory, entry);
      const text = readRecordText(file);
      if (pendingOwner !== null && text?.trim() === "") {
        removeQuietly(file);
        continue;
      }
      const record = text === undefined ? undefined : parseRecord(text, file, pendingOwner !== null);
      if (record === undefined) {
        report.invalidRecords++;
        removeQuietly(file);
        continue;
      }
      // Records of a daemon still running on the same directory are its own business.
      if (
        record.daemonPid !== process.pid &&
        record.bootId === this.bootId &&
        processStartTime(record.daemonPid) === record.daemonStartTime
      )
        continue;
      if (
        record.bootId === this.bootId &&
        processStartTime(record.pgid) === record.startTime &&
        readStat(record.pgid)?.[0] !== "Z"
      ) {
        try {
          process.kill(-record.pgid, "SIGKILL");
          report.killedGroups.push(record.pgid);
          lost(record, true);
        } catch {
          report.staleRecords++;
          lost(record, false);
        }
      } else {
        report.staleRecords++;
        // From another boot, its process ended with that boot; in this boot, it ended unseen.
        lost(record, false);
      }
      removeQuietly(file);
    }
    return report;
  }

  private file(pid: number): string {
    return path.join(this.directory, `${pid}.json`);
  }
}

/** The details as a record keeps them: every field there, every string cut to its length. */
function cutDetails(details: Partial<GroupRecordDetails>): GroupRecordDetails {
  const args: string[] = [];
  let length = 0;
  for (const arg of details.args ?? []) {
    length += arg.length;
    if (length > 256) break;
    args.push(arg);
  }
  return {
    command: (details.command ?? "").slice(0, 256),
    args,
    sessionId: (details.sessionId ?? "").slice(0, 256),
    cwd: (details.cwd ?? "").slice(0, 1024),
    startedAtMs: details.startedAtMs ?? 0,
    pty: details.pty ?? false,
    acceptsInput: details.acceptsInput ?? false,
  };
}

/** The details of a record read back, when they are whole and of the right types; undefined otherwise. */
function validDetails(value: unknown): GroupRecordDetails | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const details = value as Partial<GroupRecordDetails>;
  const text = (field: unknown, most: number) => typeof field === "string" && field.length <= most;
  if (!text(details.command, 256) || !text(details.sessionId, 256) || !text(details.cwd, 1024)) return undefined;
  if (!Array.isArray(details.args) || !details.args.every((arg) => typeof arg === "string")) return undefined;
  if (details.args.reduce((sum, arg) => sum + arg.length, 0) > 256) return undefined;
  // As a request's own would be (spec-validation.ts): no control characters in the session.
  if (/[\0-\x1f\x7f]/.test(details.sessionId!) || details.cwd!.includes("\0")) return undefined;
  // A start before now: a later one (or none) is not believed, and a record says it started now.
  if (!Number.isSafeInteger(details.startedAtMs) || details.startedAtMs! <= 0 || details.startedAtMs! > Date.now())
    return undefined;
  if (typeof details.pty !== "boolean" || typeof details.acceptsInput !== "boolean") return undefined;
  return details as GroupRecordDetails;
}

/**
 * The text of a record file, opened without following symlinks and without waiting (a planted FIFO),
 * when it is a regular file of at most four times a record's room (a record is never larger than its
 * room; a file edited by hand may be a little); undefined otherwise.
 */
function readRecordText(file: string): string | undefined {
  try {
    const fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile() || stat.size > 4 * recordBytes) return undefined;
      return readFileSync(fd, "utf8");
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

/** Validates a record file's text; undefined when it is not a record this daemon would act on. */
function parseRecord(text: string, file: string, pending = false): GroupRecord | undefined {
  let value: Partial<GroupRecord>;
  try {
    value = JSON.parse(text) as Partial<GroupRecord>;
  } catch {
    return undefined;
  }
  const positive = (number: unknown) => Number.isSafeInteger(number) && (number as number) > 0;
  if (!positive(value.pgid) || value.pgid! <= 1 || value.pgid === process.pid || value.pgid === ownGroup)
    return undefined;
  if (!positive(value.startTime) || typeof value.bootId !== "string" || !positive(value.daemonPid)) return undefined;
  if (!pending && path.basename(file) !== `${value.pgid}.json`) return undefined;
  // A process id as a request's own would be (spec-validation.ts): otherwise none is reported.
  if (typeof value.processId !== "string" || value.processId.length > 256 || /[\0-\x1f\x7f/]/.test(value.processId))
    value.processId = "";
  // Details that are not what this daemon writes are dropped, not believed: the record still names a group.
  const details = validDetails(value.details);
  if (details === undefined) delete value.details;
  else value.details = details;
  return value as GroupRecord;
}

function removeQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // Gone meanwhile.
  }
}

function readBootId(): string {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    return "unknown";
  }
}

/** Kernel start time of a process in clock ticks since boot, or undefined when it is gone. */
export function processStartTime(pid: number): number | undefined {
  const stat = readStat(pid);
  return stat === undefined ? undefined : Number(stat[19]);
}

/** Fields of /proc/<pid>/stat after the command name (field 3, the state, is index 0). */
function readStat(pid: number): string[] | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    return text.slice(text.lastIndexOf(")") + 2).split(" ");
  } catch {
    return undefined;
  }
}
