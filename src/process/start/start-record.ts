import { ProcessError } from "../errors.js";
import type { GroupLedger, GroupReservation } from "../housekeeping/index.js";
import type { ManagedProcess } from "../managed-process.js";

/**
 * Reserves the state directory's record of a command about to start (see `GroupLedger`), so that a
 * daemon that dies before it sees the command end leaves it to the next one; undefined without a
 * state directory. A record that cannot be reserved refuses the start with STATE_NOT_RECORDED:
 * better no command than one a restarted daemon cannot account for.
 */
export function reserveStartRecord(
  ledger: GroupLedger | undefined,
  log: ((message: string) => void) | undefined,
): GroupReservation | undefined {
  try {
    return ledger?.reserve();
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code ?? (cause as Error).message;
    log?.(`state directory ${ledger!.directory}: could not record a process group (${code}); start refused`);
    throw new ProcessError(
      `the state directory cannot record the process (${code}): not started`,
      "STATE_NOT_RECORDED",
      {
        metadata: { errno: code },
        cause,
      },
    );
  }
}

/**
 * Writes the record of a started command (its group leader `pid`) into its reservation, with what a
 * later daemon may tell of it. When it cannot be written, the command is stopped as it started
 * (stage `state`) and the log says so.
 */
export function commitStartRecord(
  reservation: GroupReservation,
  managed: ManagedProcess,
  pid: number,
  ledgerDirectory: string,
  log: ((message: string) => void) | undefined,
): void {
  const description = managed.description;
  try {
    reservation.commit(pid, description.id, {
      command: description.command,
      args: [...description.args],
      sessionId: description.sessionId,
      cwd: description.cwd,
      startedAtMs: managed.startTime.getTime(),
      pty: description.pty,
      acceptsInput: description.acceptsInput,
    });
  } catch (cause) {
    managed.abortStarted({
      stage: "state",
      errno: (cause as NodeJS.ErrnoException).code,
      message: `the state directory could not record the process group: ${(cause as Error).message}`,
    });
    log?.(
      `state directory ${ledgerDirectory}: could not record process group ${pid} (${(cause as Error).message}); killed it`,
    );
  }
}
