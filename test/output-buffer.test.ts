import { describe, expect, it } from "vitest";
import { OutputBuffer, type OutputItem, type OutputReader, type OutputStreamName } from "../src/process/index.js";

/** Reads everything currently available (no follow). */
async function drain(reader: OutputReader): Promise<OutputItem[]> {
  const items: OutputItem[] = [];
  for await (const item of reader.items({ follow: false })) items.push(item);
  return items;
}

/** Bytes of `count` length where byte i is (seed + i) mod 251, so any misplaced byte shows. */
function pattern(count: number, seed = 0): Buffer {
  const bytes = Buffer.alloc(count);
  for (let i = 0; i < count; i++) bytes[i] = (seed + i) % 251;
  return bytes;
}

/**
 * Checks that items cover one stream contiguously from `from` (chunks and gaps alike) and returns
 * the chunk bytes joined and the total missed.
 */
function replay(
  items: readonly OutputItem[],
  stream: OutputStreamName,
  from = 0,
): { bytes: Buffer; missed: number; end: number } {
  let next = from;
  let missed = 0;
  const parts: Uint8Array[] = [];
  for (const item of items) {
    if (item.stream !== stream) continue;
    if (item.offset !== next) throw new Error(`${stream} item at offset ${item.offset}, expected ${next}`);
    if (item.kind === "gap") {
      missed += item.missedBytes;
      next += item.missedBytes;
    } else {
      parts.push(item.data);
      next += item.data.length;
    }
  }
  return { bytes: Buffer.concat(parts), missed, end: next };
}

/** Retained bytes of both streams, from the public offsets. */
function retained(buffer: OutputBuffer): number {
  return buffer.offsets.stdout - buffer.retainedFrom.stdout + (buffer.offsets.stderr - buffer.retainedFrom.stderr);
}

describe("OutputBuffer offsets and order", () => {
  it("gives each stream its own offsets and keeps arrival order across streams", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 1 << 20 });
    buffer.append("stdout", Buffer.from("ab"));
    buffer.append("stderr", Buffer.from("XYZ"));
    buffer.append("stdout", Buffer.from("c"));
    buffer.append("stdout", new Uint8Array(0));
    expect(buffer.offsets).toEqual({ stdout: 3, stderr: 3 });
    const items = await drain(buffer.createReader());
    expect(
      items.map((item) => [item.stream, item.offset, item.kind === "chunk" && Buffer.from(item.data).toString()]),
    ).toEqual([
      ["stdout", 0, "ab"],
      ["stderr", 0, "XYZ"],
      ["stdout", 2, "c"],
    ]);
  });

  it("starts a reader at any offset, including inside a chunk", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 1 << 20 });
    const out = pattern(10_000, 1);
    const err = pattern(6000, 2);
    buffer.append("stdout", out.subarray(0, 5000));
    buffer.append("stderr", err);
    buffer.append("stdout", out.subarray(5000));
    for (const [stdoutFrom, stderrFrom] of [
      [0, 0],
      [1, 5999],
      [4999, 6000],
      [5000, 3],
      [9999, 0],
      [10_000, 6000],
    ]) {
      const items = await drain(buffer.createReader({ stdout: stdoutFrom, stderr: stderrFrom }));
      expect(replay(items, "stdout", stdoutFrom).bytes.equals(out.subarray(stdoutFrom))).toBe(true);
      expect(replay(items, "stderr", stderrFrom).bytes.equals(err.subarray(stderrFrom))).toBe(true);
      expect(items.some((item) => item.kind === "gap")).toBe(false);
    }
  });

  it("refuses appends after end, and end is idempotent", () => {
    const buffer = new OutputBuffer({ capacityBytes: 100 });
    buffer.end();
    buffer.end();
    expect(buffer.isEnded).toBe(true);
    expect(() => buffer.append("stdout", Buffer.from("x"))).toThrow(/already ended/);
  });
});

describe("OutputBuffer coalescing", () => {
  it("merges small writes of one stream into few chunks, without mixing streams", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 1 << 20 });
    const expected = pattern(3000);
    for (let i = 0; i < expected.length; i++) buffer.append("stdout", expected.subarray(i, i + 1));
    buffer.append("stderr", Buffer.from("e"));
    buffer.append("stdout", Buffer.from("f"));
    const items = await drain(buffer.createReader());
    expect(items).toHaveLength(3);
    expect(replay(items, "stdout").bytes.equals(Buffer.concat([expected, Buffer.from("f")]))).toBe(true);
  });

  it("keeps merged chunks at most 64 KiB", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 16 << 20 });
    const expected = pattern(1 << 20, 7);
    for (let at = 0; at < expected.length; at += 1000) buffer.append("stdout", expected.subarray(at, at + 1000));
    const items = await drain(buffer.createReader());
    for (const item of items) if (item.kind === "chunk") expect(item.data.length).toBeLessThanOrEqual(64 * 1024);
    expect(replay(items, "stdout").bytes.equals(expected)).toBe(true);
  });

  it("hands a following reader only the new bytes of a chunk that grew after it was read", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 1 << 20 });
    const reader = buffer.createReader();
    const seen: OutputItem[] = [];
    const following = (async () => {
      for await (const item of reader.items({ follow: true })) seen.push(item);
    })();
    const expected = pattern(5000, 3);
    for (let at = 0; at < expected.length; at += 100) {
      buffer.append("stdout", expected.subarray(at, at + 100));
      // Let the follower read between writes, so it reads a chunk that later grows.
      await new Promise((resolve) => setImmediate(resolve));
    }
    buffer.end();
    await following;
    expect(seen.length).toBeGreaterThan(1);
    expect(replay(seen, "stdout").bytes.equals(expected)).toBe(true);
  });
});

describe("OutputBuffer bounds and gaps", () => {
  it("drops the oldest output beyond capacity and tells a late reader exactly how much it missed", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 20_000 });
    const expected = pattern(100_000, 5);
    for (let at = 0; at < expected.length; at += 5000) buffer.append("stdout", expected.subarray(at, at + 5000));
    expect(retained(buffer)).toBeLessThanOrEqual(20_000);
    const from = buffer.retainedFrom.stdout;
    expect(from).toBeGreaterThan(0);
    const items = await drain(buffer.createReader());
    expect(items[0]).toEqual({ kind: "gap", stream: "stdout", offset: 0, missedBytes: from });
    const result = replay(items, "stdout");
    expect(result.missed).toBe(from);
    expect(result.end).toBe(100_000);
    expect(result.bytes.equals(expected.subarray(from))).toBe(true);
    expect(Buffer.from(buffer.snapshot("stdout")).equals(expected.subarray(from))).toBe(true);
  });

  it("reports gaps per stream for interleaved output, and a reader inside a dropped chunk misses only the rest of it", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 30_000 });
    const out = pattern(80_000, 11);
    const err = pattern(80_000, 13);
    for (let at = 0; at < 80_000; at += 8000) {
      buffer.append("stdout", out.subarray(at, at + 8000));
      buffer.append("stderr", err.subarray(at, at + 8000));
    }
    const items = await drain(buffer.createReader({ stdout: 100, stderr: 7 }));
    const gaps = items.filter((item) => item.kind === "gap");
    expect(gaps).toEqual([
      { kind: "gap", stream: "stdout", offset: 100, missedBytes: buffer.retainedFrom.stdout - 100 },
      { kind: "gap", stream: "stderr", offset: 7, missedBytes: buffer.retainedFrom.stderr - 7 },
    ]);
    expect(replay(items, "stdout", 100).bytes.equals(out.subarray(buffer.retainedFrom.stdout))).toBe(true);
    expect(replay(items, "stderr", 7).bytes.equals(err.subarray(buffer.retainedFrom.stderr))).toBe(true);
  });

  it("stays bounded under a flood of tiny writes that cannot be merged", () => {
    const buffer = new OutputBuffer({ capacityBytes: 64 * 1024 });
    for (let i = 0; i < 200_000; i++) buffer.append(i % 2 === 0 ? "stdout" : "stderr", Buffer.from("x"));
    // Each chunk is charged bookkeeping too, so far fewer than 64 Ki single bytes are kept.
    expect(retained(buffer)).toBeLessThan(2000);
    expect(buffer.offsets).toEqual({ stdout: 100_000, stderr: 100_000 });
  });

  it("keeps appending cheap when a full buffer holds many small chunks", async () => {
    // Interleaved short lines cannot be merged: 8 MiB holds some 70 000 chunks. Dropping the oldest
    // once copied them all on every append (minutes for this loop); it must stay linear.
    const buffer = new OutputBuffer({ capacityBytes: 8 * 1024 * 1024 });
    const line = Buffer.alloc(50, 0x61);
    for (let i = 0; i < 400_000; i++) buffer.append(i % 2 === 0 ? "stdout" : "stderr", line);
    expect(buffer.offsets).toEqual({ stdout: 10_000_000, stderr: 10_000_000 });
    expect(retained(buffer)).toBeLessThanOrEqual(8 * 1024 * 1024);
    // A late reader still gets exact gaps and then every retained byte, in order.
    const items = await drain(buffer.createReader());
    const out = replay(items, "stdout");
    const err = replay(items, "stderr");
    expect(out.end).toBe(10_000_000);
    expect(err.end).toBe(10_000_000);
    expect(out.bytes.length + out.missed).toBe(10_000_000);
    expect(out.missed).toBe(buffer.retainedFrom.stdout);
    expect(Buffer.from(buffer.snapshot("stderr")).equals(err.bytes)).toBe(true);
  });

  it("lets a stalled reader fall behind without slowing the producer or another reader", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 10_000 });
    const stalled = buffer.createReader();
    const stalledItems = stalled.items({ follow: true });
    const first = await (async () => {
      buffer.append("stdout", pattern(2000));
      return stalledItems.next();
    })();
    expect(first.value).toMatchObject({ kind: "chunk", offset: 0 });
    const fast = buffer.createReader({ stdout: 2000 });
    const fastSeen: OutputItem[] = [];
    const expected = pattern(200_000);
    for (let at = 2000; at < expected.length; at += 5000) {
      buffer.append("stdout", expected.subarray(at, at + 5000));
      for await (const item of fast.items({ follow: false })) fastSeen.push(item);
    }
    buffer.end();
    expect(replay(fastSeen, "stdout", 2000).bytes.equals(expected.subarray(2000))).toBe(true);
    const rest: OutputItem[] = [];
    for (let next = await stalledItems.next(); !next.done; next = await stalledItems.next()) rest.push(next.value);
    expect(rest[0]).toEqual({
      kind: "gap",
      stream: "stdout",
      offset: 2000,
      missedBytes: buffer.retainedFrom.stdout - 2000,
    });
    const result = replay(rest, "stdout", 2000);
    expect(result.end).toBe(200_000);
    expect(result.bytes.equals(expected.subarray(buffer.retainedFrom.stdout))).toBe(true);
  });
});

describe("OutputBuffer pinned reader", () => {
  it("never loses a byte for the pinned reader and asks the producer to pause and resume", async () => {
    const signals: boolean[] = [];
    const buffer = new OutputBuffer({ capacityBytes: 10_000, onBackpressure: (paused) => signals.push(paused) });
    const pinned = buffer.createReader({}, { pinned: true });
    const items = pinned.items({ follow: true });
    const expected = pattern(50_000, 17);
    // The producer writes until told to pause, as a child does.
    let written = 0;
    const produce = () => {
      while (written < expected.length && signals.at(-1) !== true) {
        buffer.append("stdout", expected.subarray(written, written + 1000));
        written += 1000;
      }
      if (written === expected.length) buffer.end();
    };
    produce();
    expect(signals).toEqual([true]);
    expect(written).toBeLessThan(expected.length);
    // Nothing the pinned reader has not read was dropped, even though it is over capacity.
    expect(buffer.retainedFrom.stdout).toBe(0);

    const seen: OutputItem[] = [];
    for (let next = await items.next(); !next.done; next = await items.next()) {
      seen.push(next.value);
      if (signals.at(-1) === false) produce();
    }
    expect(seen.every((item) => item.kind === "chunk")).toBe(true);
    expect(replay(seen, "stdout").bytes.equals(expected)).toBe(true);
    expect(signals.length).toBeGreaterThan(2);
    // Alternating pause and resume, never two of a kind in a row.
    signals.forEach((paused, index) => expect(paused).toBe(index % 2 === 0));
  });

  it("lets other readers lose only what the pinned reader has consumed", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 5000, onBackpressure: () => {} });
    const pinned = buffer.createReader({}, { pinned: true });
    const other = buffer.createReader();
    for (let i = 0; i < 10; i++) buffer.append("stdout", pattern(1000, i));
    // The pinned reader has read nothing: everything is kept.
    expect(buffer.retainedFrom.stdout).toBe(0);
    const pinnedItems = pinned.items({ follow: false });
    for (let i = 0; i < 5; i++) await pinnedItems.next();
    // Now the first chunks are consumed and may go; the other reader learns of it as a gap.
    const otherItems = await drain(other);
    const gap = otherItems[0];
    expect(gap.kind).toBe("gap");
    expect(gap.kind === "gap" && gap.missedBytes).toBeGreaterThan(0);
    expect(buffer.retainedFrom.stdout).toBeLessThanOrEqual(pinned.consumedOffsets.stdout);
  });

  it("runs free again once unpinned, and allows only one pinned reader", () => {
    const signals: boolean[] = [];
    const buffer = new OutputBuffer({ capacityBytes: 10_000, onBackpressure: (paused) => signals.push(paused) });
    const pinned = buffer.createReader({}, { pinned: true });
    expect(() => buffer.createReader({}, { pinned: true })).toThrow(/already has a pinned reader/);
    // Chunks of 5000 bytes are not merged, so the oldest can be dropped one by one.
    for (let i = 0; i < 5; i++) buffer.append("stdout", pattern(5000));
    expect(signals).toEqual([true]);
    expect(buffer.retainedFrom.stdout).toBe(0);
    buffer.unpin(pinned);
    expect(signals).toEqual([true, false]);
    expect(retained(buffer)).toBeLessThanOrEqual(10_000);
    buffer.createReader({}, { pinned: true });
  });
});

describe("OutputReader follow and abort", () => {
  it("waits for output while following, and ends when the buffer ends", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 1000 });
    const seen: OutputItem[] = [];
    const following = (async () => {
      for await (const item of buffer.createReader().items({ follow: true })) seen.push(item);
    })();
    buffer.append("stderr", Buffer.from("late"));
    buffer.end();
    await following;
    expect(replay(seen, "stderr").bytes.toString()).toBe("late");
  });

  it("returns (does not throw) when its signal aborts while waiting", async () => {
    const buffer = new OutputBuffer({ capacityBytes: 1000 });
    const controller = new AbortController();
    const following = (async () => {
      const seen: OutputItem[] = [];
      for await (const item of buffer.createReader().items({ follow: true, signal: controller.signal }))
        seen.push(item);
      return seen;
    })();
    buffer.append("stdout", Buffer.from("a"));
    await new Promise((resolve) => setImmediate(resolve));
    controller.abort();
    expect(await following).toHaveLength(1);
  });
});
