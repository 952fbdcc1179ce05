import { mkdirSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import path from "node:path";

const ownStartTime = processStartTime(process.pid);

/** What {@link GroupLedger.reapLeftovers} did. */
export interface ReapReport {
  /** Process groups of a previous daemon that were still running and have been sent SIGKILL. */
  killedGroups: number[];
  /** Records whose group was already gone (or whose pid was reused by someone else). */
  staleRecords: number;
}

/**
 * GroupLedger records every process group the daemon starts in a state directory, one file per
 * group holding its pgid and the kernel start time of its leader, and forgets it when the group has
 * exited. A daemon killed with SIGKILL cannot kill its children; the next daemon started on the same
 * state directory calls {@link reapLeftovers} first and kills every group still recorded, so
 * nothing keeps running unaccounted. The start time (field 22 of /proc/<pid>/stat) guards against
 * pid reuse: a process is only killed when it is in the recorded group and did not start before
 * the recorded leader.
 */
export class GroupLedger {
  /** Creates the state directory (mode 0700) when missing. */
  constructor(readonly directory: string) {
    mkdirSync(directory, { recursive: true, mode: 0o700 });
  }

  /** Records a started group; `pid` is its leader and pgid. Failures (a full disk) are ignored. */
  record(pid: number, processId: string): void {
    const startTime = processStartTime(pid);
    if (startTime === undefined) return;
    try {
      writeFileSync(this.file(pid), JSON.stringify({ pgid: pid, startTime, processId, daemonPid: process.pid, daemonStartTime: ownStartTime }) + "\n", { mode: 0o600 });
    } catch {
      // The ledger is a safety net; a failed write must not fail the command.
    }
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
   * Kills (SIGKILL) every recorded group still running, verifying start times against pid reuse,
   * and clears the ledger. Call before starting anything.
   */
  reapLeftovers(): ReapReport {
    const report: ReapReport = { killedGroups: [], staleRecords: 0 };
    for (const entry of readdirSync(this.directory)) {
      if (!entry.endsWith(".json")) continue;
      const file = path.join(this.directory, entry);
      let record: { pgid: number; startTime: number; daemonPid: number; daemonStartTime: number };
      try {
        record = JSON.parse(readFileSync(file, "utf8"));
      } catch {
        unlinkSync(file);
        continue;
      }
      // Records of a daemon still running on the same directory are its own business.
      if (record.daemonPid !== process.pid && processStartTime(record.daemonPid) === record.daemonStartTime) continue;
      const members = groupMembersSince(record.pgid, record.startTime);
      if (members.length > 0) {
        try {
          process.kill(-record.pgid, "SIGKILL");
        } catch {
          for (const pid of members) {
            try {
              process.kill(pid, "SIGKILL");
            } catch {
              // Gone meanwhile.
            }
          }
        }
        report.killedGroups.push(record.pgid);
      } else {
        report.staleRecords++;
      }
      unlinkSync(file);
    }
    return report;
  }

  private file(pid: number): string {
    return path.join(this.directory, `${pid}.json`);
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

function groupMembersSince(pgid: number, startTime: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = readStat(Number(entry));
    if (fields === undefined || fields[0] === "Z") continue;
    if (Number(fields[2]) === pgid && Number(fields[19]) >= startTime) members.push(Number(entry));
  }
  return members;
}
