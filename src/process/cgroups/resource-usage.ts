/**
 * What one command's process tree used, read from its own cgroups. A field is undefined where the
 * daemon cannot tell (no cgroup of that kind on this machine, or it could not be read): undefined
 * means unknown, never zero.
 */
export interface ResourceUsage {
  /** CPU time in user mode, in microseconds. */
  cpuUserUs?: number;
  /** CPU time in the kernel on its behalf, in microseconds. */
  cpuSystemUs?: number;
  /** The most memory it used at once, in bytes (page cache included). */
  memoryPeakBytes?: number;
  /** Memory in use now, in bytes (live readings only). */
  memoryCurrentBytes?: number;
  /** Bytes read from block devices. */
  ioReadBytes?: number;
  /** Bytes written to block devices. */
  ioWriteBytes?: number;
  /** Processes of it the kernel killed for lack of memory. */
  oomKills?: number;
}

/** Clock ticks per second of the `cpuacct.stat` counters (USER_HZ, 100 on every Linux architecture that matters). */
const userHz = 100;

/**
 * CPU times of a cgroup v2 `cpu.stat` (`user_usec`, `system_usec`) or a v1 `cpuacct.stat` (`user`,
 * `system`, in USER_HZ ticks), in microseconds; an empty object when the text has neither.
 */
export function parseCpuTimes(text: string): Pick<ResourceUsage, "cpuUserUs" | "cpuSystemUs"> {
  const user = keyedValue(text, "user_usec");
  if (user !== undefined) return { cpuUserUs: user, cpuSystemUs: keyedValue(text, "system_usec") };
  const ticks = keyedValue(text, "user");
  const systemTicks = keyedValue(text, "system");
  if (ticks === undefined || systemTicks === undefined) return {};
  return { cpuUserUs: ticks * (1_000_000 / userHz), cpuSystemUs: systemTicks * (1_000_000 / userHz) };
}

/**
 * Bytes read and written of a cgroup v2 `io.stat` (`<major>:<minor> rbytes=N wbytes=N ...` per
 * device, summed) or a v1 `blkio.throttle.io_service_bytes` (`<major>:<minor> Read N`, `... Write N`
 * per device, and a `Total` line, skipped); zero for a cgroup that did no block I/O.
 */
export function parseIoBytes(text: string): Pick<ResourceUsage, "ioReadBytes" | "ioWriteBytes"> {
  let read = 0;
  let written = 0;
  for (const line of text.split("\n")) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 2 || !fields[0]!.includes(":")) continue;
    if (fields.length === 3 && (fields[1] === "Read" || fields[1] === "Write")) {
      if (fields[1] === "Read") read += Number(fields[2]) || 0;
      else written += Number(fields[2]) || 0;
      continue;
    }
    for (const field of fields.slice(1)) {
      if (field.startsWith("rbytes=")) read += Number(field.slice(7)) || 0;
      else if (field.startsWith("wbytes=")) written += Number(field.slice(7)) || 0;
    }
  }
  return { ioReadBytes: read, ioWriteBytes: written };
}

/**
 * The number after `key` on a line of its own (`key value`), as in `cpu.stat`, `memory.events`
 * and `memory.oom_control`; undefined when there is no such line.
 */
export function keyedValue(text: string, key: string): number | undefined {
  let from = 0;
  for (;;) {
    const at = text.indexOf(key, from);
    if (at < 0) return undefined;
    from = at + key.length;
    if ((at === 0 || text[at - 1] === "\n") && text[from] === " ") {
      const end = text.indexOf("\n", from);
      const value = Number(text.slice(from + 1, end < 0 ? undefined : end));
      return Number.isFinite(value) ? value : undefined;
    }
  }
}
