import { describe, expect, it } from "vitest";
import {
  defaultMemoryBudgetBytes,
  MemoryBudget,
  OutputBuffer,
  type OutputItem,
  type OutputReader,
} from "../src/process/index.js";

const kib = 1024;
const mib = 1024 * kib;

/** Reads everything currently available (no follow). */
async function drain(reader: OutputReader): Promise<OutputItem[]> {
  const items: OutputItem[] = [];
  for await (const item of reader.items({ follow: false })) items.push(item);
  return items;
}

describe("MemoryBudget", () => {
  it("the default is a twentieth of the memory, at least 128 MiB (at most a quarter of it), at most 4 GiB", () => {
    expect(defaultMemoryBudgetBytes(24 * 1024 * mib)).toBe(Math.floor((24 * 1024 * mib) / 20));
    expect(defaultMemoryBudgetBytes(2 * 1024 * mib)).toBe(128 * mib);
    expect(defaultMemoryBudgetBytes(256 * mib)).toBe(64 * mib);
    expect(defaultMemoryBudgetBytes(1024 * 1024 * mib)).toBe(4096 * mib);
    expect(defaultMemoryBudgetBytes()).toBeGreaterThan(0);
  });

  it("reclaims past the limit, a little below it, and never re-entrantly", () => {
    const targets: number[] = [];
    let held = 0;
    const budget: MemoryBudget = new MemoryBudget({
      limitBytes: 64 * mib,
      reclaim(target) {
        targets.push(target);
        // A release while reclaiming, as a trimmed buffer charges it; and a charge, which must not recurse.
        budget.charge(-(held - target));
        held = target;
        budget.charge(1);
        budget.charge(-1);
      },
    });
    held = 64 * mib;
    budget.charge(held);
    expect(targets).toEqual([]);
    held += 2 * mib;
    budget.charge(2 * mib);
    // A sixty-fourth of the limit below it: 1 MiB.
    expect(targets).toEqual([63 * mib]);
    expect(budget.usedBytes).toBe(63 * mib);
    expect(budget.exhausted).toBe(false);
  });

  it("fits() makes room by reclaiming, and says no when what is held cannot go", () => {
    let droppable = 10 * mib;
    const budget = new MemoryBudget({
      limitBytes: 16 * mib,
      reclaim(target) {
        const release = Math.min(droppable, budget.usedBytes - target);
        if (release <= 0) return;
        droppable -= release;
        budget.charge(-release);
      },
    });
    budget.charge(15 * mib);
    expect(budget.fits(4 * mib)).toBe(true);
    expect(budget.usedBytes).toBeLessThanOrEqual(12 * mib);
    budget.charge(4 * mib);
    expect(budget.fits(16 * mib)).toBe(false);
    // Everything droppable went; the rest stays.
    expect(droppable).toBe(0);
    expect(budget.usedBytes).toBe(9 * mib);
  });

  it("does not repeat a reclaim that found nothing to drop until something new is charged", () => {
    let reclaims = 0;
    const budget = new MemoryBudget({ limitBytes: mib, reclaim: () => reclaims++ });
    budget.charge(2 * mib);
    expect(reclaims).toBe(1);
    for (let look = 0; look < 100; look++) expect(budget.fits(0)).toBe(false);
    expect(reclaims).toBe(1);
    budget.charge(kib);
    expect(reclaims).toBe(2);
  });

  it("stdin may always use half the limit; beyond it input needs room as output does", () => {
    const budget = new MemoryBudget({ limitBytes: mib });
    // Output nobody can drop fills the budget.
    budget.charge(2 * mib);
    expect(budget.fits(0)).toBe(false);
    expect(budget.fitsInput(512 * kib)).toBe(true);
    budget.chargeInput(512 * kib);
    expect(budget.inputBytes).toBe(512 * kib);
    expect(budget.fitsInput(1)).toBe(false);
    budget.chargeInput(-512 * kib);
    budget.charge(-2 * mib);
    expect([budget.inputBytes, budget.usedBytes]).toEqual([0, 0]);
    // With room, input may take more than half.
    expect(budget.fitsInput(768 * kib)).toBe(true);
  });

  it("wakes waiters at the next release, and lets an aborted wait go", async () => {
    const budget = new MemoryBudget({ limitBytes: mib });
    budget.charge(mib);
    let woken = false;
    const waiting = budget.nextRelease().then(() => (woken = true));
    budget.charge(kib);
    await Promise.resolve();
    expect(woken).toBe(false);
    budget.charge(-kib);
    await waiting;
    expect(woken).toBe(true);
    const aborted = new AbortController();
    const gone = budget.nextRelease(aborted.signal);
    aborted.abort(new Error("call ended"));
    await expect(gone).rejects.toThrow("call ended");
  });
});

describe("OutputBuffer on a shared budget", () => {
  it("charges what it retains, as it appends, drops and lets go", () => {
    const budget = new MemoryBudget({ limitBytes: 64 * mib });
    const buffer = new OutputBuffer({ capacityBytes: 256 * kib, budget });
    for (let index = 0; index < 10; index++) buffer.append("stdout", new Uint8Array(64 * kib));
    expect(budget.usedBytes).toBe(buffer.retainedBytes);
    expect(buffer.retainedBytes).toBeLessThanOrEqual(256 * kib + 64);
    buffer.trimTo(64 * kib);
    expect(budget.usedBytes).toBe(buffer.retainedBytes);
    expect(buffer.leaveBudget()).toBeGreaterThan(0);
    expect(budget.usedBytes).toBe(0);
    // After leaving, nothing is charged any more.
    buffer.append("stdout", new Uint8Array(kib));
    expect(budget.usedBytes).toBe(0);
  });

  it("trimTo drops the oldest output and a reader is told exactly what it missed", async () => {
    const buffer = new OutputBuffer({ capacityBytes: mib });
    for (let index = 0; index < 8; index++) buffer.append("stdout", new Uint8Array(64 * kib).fill(index));
    // To the byte: two whole chunks and the end of a third, with the bookkeeping of the three, fill 150 KiB.
    const released = buffer.trimTo(150 * kib);
    const kept = 150 * kib - 3 * 64;
    expect(released).toBe(8 * 64 * kib - kept + 5 * 64);
    const items = await drain(buffer.createReader());
    expect(items[0]).toEqual({ kind: "gap", stream: "stdout", offset: 0, missedBytes: 8 * 64 * kib - kept });
    const data = Buffer.concat(items.flatMap((item) => (item.kind === "chunk" ? [item.data] : [])));
    expect(data.length).toBe(kept);
    expect([data[0], data.at(-1)]).toEqual([5, 7]);
  });

  it("an exhausted budget pauses a pinned reader's producer at its share of the budget, and its room resumes it", async () => {
    const budget = new MemoryBudget({ limitBytes: mib });
    const states: boolean[] = [];
    const buffers = Array.from(
      { length: 4 },
      (_, index) =>
        new OutputBuffer({
          capacityBytes: 8 * mib,
          budget,
          onBackpressure: (paused) => index === 0 && states.push(paused),
        }),
    );
    const readers = buffers.map((buffer) => buffer.createReader({}, { pinned: true }));
    // Four pinned readers share the budget: 256 KiB each.
    expect(budget.pinnedShareBytes).toBe(256 * kib);
    // Something else holds the whole budget and cannot give it back.
    budget.charge(mib);
    buffers[0].append("stdout", new Uint8Array(128 * kib));
    expect(states).toEqual([]);
    buffers[0].append("stdout", new Uint8Array(128 * kib));
    // Not the 8 MiB capacity: its share unread, the budget exhausted.
    expect(states).toEqual([true]);
    budget.charge(-mib);
    await new Promise((resolve) => setImmediate(resolve));
    expect(states).toEqual([true, false]);
    // The unread bytes were never dropped.
    const items = await drain(readers[0]);
    expect(items.every((item) => item.kind === "chunk")).toBe(true);
    expect(items.reduce((sum, item) => sum + (item.kind === "chunk" ? item.data.length : 0), 0)).toBe(256 * kib);
    // Readers let go of are counted out; the share never goes below 64 KiB.
    for (const [index, buffer] of buffers.entries()) buffer.unpin(readers[index]);
    expect(budget.pinnedShareBytes).toBe(mib);
    const crowded = new MemoryBudget({ limitBytes: mib });
    for (let index = 0; index < 100; index++) crowded.countPinned(1);
    expect(crowded.pinnedShareBytes).toBe(64 * kib);
  });
});
