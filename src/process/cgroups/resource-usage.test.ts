import { describe, expect, it } from "vitest";
import { keyedValue, parseCpuTimes, parseIoBytes } from "./resource-usage.js";

describe("reading a command's usage out of its cgroup files", () => {
  it("CPU times from cgroup v2 cpu.stat (microseconds) and v1 cpuacct.stat (USER_HZ ticks)", () => {
    expect(parseCpuTimes("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 0\n")).toEqual({
      cpuUserUs: 1000,
      cpuSystemUs: 500,
    });
    expect(parseCpuTimes("user 12\nsystem 3\n")).toEqual({ cpuUserUs: 120_000, cpuSystemUs: 30_000 });
    expect(parseCpuTimes("")).toEqual({});
  });

  it("the oom_kill count of v2 memory.events and v1 memory.oom_control, never a key that only ends the same", () => {
    expect(keyedValue("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n", "oom_kill")).toBe(1);
    expect(keyedValue("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill")).toBe(3);
    expect(keyedValue("oom_group_kill 2\n", "oom_kill")).toBeUndefined();
    expect(keyedValue("max 4", "max")).toBe(4);
  });

  it("block I/O bytes summed over devices: v2 io.stat and v1 blkio (its Total line skipped)", () => {
    expect(
      parseIoBytes(
        "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n253:0 rbytes=1 wbytes=2 rios=1 wios=1\n",
      ),
    ).toEqual({ ioReadBytes: 4097, ioWriteBytes: 8194 });
    expect(parseIoBytes("8:0 Read 100\n8:0 Write 50\n8:0 Sync 150\n8:0 Total 150\nTotal 150\n")).toEqual({
      ioReadBytes: 100,
      ioWriteBytes: 50,
    });
    expect(parseIoBytes("Total 0\n")).toEqual({ ioReadBytes: 0, ioWriteBytes: 0 });
  });
});
