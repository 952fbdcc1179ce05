import { describe, expect, it } from "vitest";
import { OutputBuffer, type OutputItem, type OutputReader, type OutputStreamName } from "./output-buffer.js";

/** Reads everything currently available (no follow). */
async function drain(reader: OutputReader): Promise<OutputItem[]> {
  const items: OutputItem[] = [];
  for await (const item of reader.items({ follow: false })) items.push(item);
  return items;
}

/** Bytes where byte i is (seed + i) mod 251, so a misplaced byte shows. */
function pattern(count: number, seed = 0): Buffer {
  const bytes = Buffer.alloc(count);
  for (let i = 0; i < count; i++) bytes[i] = (seed + i) % 251;
  return bytes;
}

/** One stream's items from `from` on, checked contiguous: the chunks' bytes and the gaps, in order. */
function replay(items: readonly OutputItem[], stream: OutputStreamName, from = 0) {
  let next = from;
  const gaps: Array<[number, number]> = [];
  const parts: Uint8Array[] = [];
  for (const item of items) {
    if (item.stream !== stream) continue;
    if (item.offset !== next) throw new Error(`${stream} item at ${item.offset}, expected ${next}`);
    if (item.kind === "gap") {
      gaps.push([item.offset, item.missedBytes]);
      next += item.missedBytes;
    } else {
      parts.push(item.data);
      next += item.data.length;
    }
  }
  return { bytes: Buffer.concat(parts), gaps, end: next };
}

/** Writes `bytes` to `stream` in pieces of `piece` bytes. */
function write(buffer: OutputBuffer, stream: OutputStreamName, bytes: Buffer, piece = 5000): void {
  for (let at = 0; at < bytes.length; at += piece) buffer.append(stream, bytes.subarray(at, at + piece));
}

describe("OutputBuffer head and tail", () => {
  it("keeps the first bytes of a stream and its last, with exactly one gap between them", async () => {
    const buffer = new OutputBuffer({ headBytes: 10_000, capacityBytes: 20_000 });
    const out = pattern(200_000, 3);
    // Pieces that straddle the head's end: the head is exact to the byte anyway.
    write(buffer, "stdout", out, 3333);
    const tailFrom = buffer.retainedFrom.stdout;
    expect(tailFrom).toBeGreaterThan(10_000);
    expect(200_000 - tailFrom).toBeLessThanOrEqual(20_000);
    expect(buffer.dropped()).toEqual([
      { kind: "gap", stream: "stdout", offset: 10_000, missedBytes: tailFrom - 10_000 },
    ]);
    expect(Buffer.from(buffer.headSnapshot("stdout")).equals(out.subarray(0, 10_000))).toBe(true);
    expect(Buffer.from(buffer.snapshot("stdout")).equals(out.subarray(tailFrom))).toBe(true);

    const items = await drain(buffer.createReader());
    const result = replay(items, "stdout");
    expect(result.gaps).toEqual([[10_000, tailFrom - 10_000]]);
    expect(result.end).toBe(200_000);
    expect(result.bytes.equals(Buffer.concat([out.subarray(0, 10_000), out.subarray(tailFrom)]))).toBe(true);
  });

  it("keeps a head per stream and tells each stream's one gap, in arrival order", async () => {
    const buffer = new OutputBuffer({ headBytes: 1000, capacityBytes: 30_000 });
    const out = pattern(100_000, 5);
    const err = pattern(100_000, 7);
    for (let at = 0; at < 100_000; at += 700) {
      buffer.append("stdout", out.subarray(at, at + 700));
      buffer.append("stderr", err.subarray(at, at + 700));
    }
    const gaps = buffer.dropped();
    expect(gaps.map((gap) => [gap.stream, gap.offset])).toEqual([
      ["stdout", 1000],
      ["stderr", 1000],
    ]);
    const items = await drain(buffer.createReader());
    for (const [stream, bytes] of [
      ["stdout", out],
      ["stderr", err],
    ] as const) {
      const from = buffer.retainedFrom[stream];
      const result = replay(items, stream);
      expect(result.gaps).toEqual([[1000, from - 1000]]);
      expect(result.bytes.equals(Buffer.concat([bytes.subarray(0, 1000), bytes.subarray(from)]))).toBe(true);
    }
    // The heads come first, in the order they were written, then the tails.
    expect(items.slice(0, 4).map((item) => [item.kind, item.stream, item.offset])).toEqual([
      ["chunk", "stdout", 0],
      ["chunk", "stderr", 0],
      ["chunk", "stdout", 700],
      ["chunk", "stderr", 700],
    ]);
  });

  it("has no gap while everything fits, and keeps the output contiguous in the snapshot", async () => {
    const buffer = new OutputBuffer({ headBytes: 1000, capacityBytes: 100_000 });
    const out = pattern(50_000, 9);
    write(buffer, "stdout", out, 999);
    expect(buffer.dropped()).toEqual([]);
    expect(buffer.retainedFrom.stdout).toBe(0);
    expect(buffer.headSnapshot("stdout").length).toBe(0);
    expect(Buffer.from(buffer.snapshot("stdout")).equals(out)).toBe(true);
    expect(replay(await drain(buffer.createReader()), "stdout").bytes.equals(out)).toBe(true);
  });

  it("tells a reader that starts inside the gap what it missed up to the tail, then gives the tail", async () => {
    const buffer = new OutputBuffer({ headBytes: 4096, capacityBytes: 16_384 });
    const out = pattern(100_000, 11);
    write(buffer, "stdout", out);
    const tailFrom = buffer.retainedFrom.stdout;
    const from = 50_000;
    expect(from).toBeGreaterThan(4096);
    expect(from).toBeLessThan(tailFrom);
    const items = await drain(buffer.createReader({ stdout: from }));
    expect(items[0]).toEqual({ kind: "gap", stream: "stdout", offset: from, missedBytes: tailFrom - from });
    const result = replay(items, "stdout", from);
    expect(result.bytes.equals(out.subarray(tailFrom))).toBe(true);
    // A reader inside the head gets the rest of the head, then the gap, then the tail.
    const fromHead = replay(await drain(buffer.createReader({ stdout: 100 })), "stdout", 100);
    expect(fromHead.gaps).toEqual([[4096, tailFrom - 4096]]);
    expect(fromHead.bytes.equals(Buffer.concat([out.subarray(100, 4096), out.subarray(tailFrom)]))).toBe(true);
  });

  it("lets a follower that falls behind the tail resume at the tail after one gap", async () => {
    const buffer = new OutputBuffer({ headBytes: 2000, capacityBytes: 10_000 });
    const reader = buffer.createReader();
    const items = reader.items({ follow: true });
    buffer.append("stdout", pattern(3000, 1));
    const first = await items.next();
    expect(first.value).toMatchObject({ kind: "chunk", offset: 0 });
    const all = pattern(200_000, 1);
    write(buffer, "stdout", all.subarray(3000));
    buffer.end();
    const seen: OutputItem[] = [first.value as OutputItem];
    for (let next = await items.next(); !next.done; next = await items.next()) seen.push(next.value);
    const result = replay(seen, "stdout");
    const tailFrom = buffer.retainedFrom.stdout;
    // It had read the head and the tail's first chunk (both there when it first read) before it fell behind.
    expect(result.gaps).toEqual([[3000, tailFrom - 3000]]);
    expect(result.bytes.equals(Buffer.concat([all.subarray(0, 3000), all.subarray(tailFrom)]))).toBe(true);
  });

  it("gives a stream whose tail is all gone its head and one gap to the end", async () => {
    const buffer = new OutputBuffer({ headBytes: 1000, capacityBytes: 10_000 });
    buffer.append("stderr", pattern(5000, 2));
    write(buffer, "stdout", pattern(100_000, 3));
    expect(buffer.dropped().filter((gap) => gap.stream === "stderr")).toEqual([
      { kind: "gap", stream: "stderr", offset: 1000, missedBytes: 4000 },
    ]);
    expect(buffer.retainedFrom.stderr).toBe(5000);
    expect(buffer.snapshot("stderr").length).toBe(0);
    const result = replay(await drain(buffer.createReader()), "stderr");
    expect(result.gaps).toEqual([[1000, 4000]]);
    expect(result.end).toBe(5000);
    expect(result.bytes.equals(pattern(1000, 2))).toBe(true);
  });
});

describe("OutputBuffer head and tail read in large messages", () => {
  it("joins chunks on each side of the gap, never across it, and cuts at the byte limit", async () => {
    const buffer = new OutputBuffer({ headBytes: 10_000, capacityBytes: 30_000 });
    const out = pattern(200_000, 12);
    write(buffer, "stdout", out, 1000);
    buffer.append("stderr", Buffer.from("err"));
    const items: OutputItem[] = [];
    for await (const item of buffer.createReader().items({ follow: false, maxChunkBytes: 7000 })) items.push(item);
    const tailFrom = buffer.retainedFrom.stdout;
    const stdout = replay(items, "stdout");
    expect(stdout.gaps).toEqual([[10_000, tailFrom - 10_000]]);
    expect(stdout.bytes.equals(Buffer.concat([out.subarray(0, 10_000), out.subarray(tailFrom)]))).toBe(true);
    expect(replay(items, "stderr").bytes.toString()).toBe("err");
    for (const item of items) if (item.kind === "chunk") expect(item.data.length).toBeLessThanOrEqual(7000);
    // The head came in few messages, not one per write.
    expect(items.filter((item) => item.kind === "chunk" && item.offset < 10_000).length).toBeLessThanOrEqual(3);
  });
});

describe("OutputBuffer head and tail under a budget", () => {
  it("trims the tail from its start and keeps the head while the tail has something to give", () => {
    const buffer = new OutputBuffer({ headBytes: 10_000, capacityBytes: 100_000 });
    const out = pattern(100_000, 4);
    write(buffer, "stdout", out);
    buffer.trimTo(40_000);
    expect(buffer.retainedBytes).toBeLessThanOrEqual(40_000);
    expect(Buffer.from(buffer.headSnapshot("stdout")).equals(out.subarray(0, 10_000))).toBe(true);
    const tailFrom = buffer.retainedFrom.stdout;
    expect(buffer.dropped()).toEqual([
      { kind: "gap", stream: "stdout", offset: 10_000, missedBytes: tailFrom - 10_000 },
    ]);
    // The newest bytes are the last to go.
    expect(Buffer.from(buffer.snapshot("stdout")).equals(out.subarray(tailFrom))).toBe(true);
  });

  it("drops the heads, whole, only for a trim below what they hold, and keeps the tail's last bytes: one gap, from 0", () => {
    const buffer = new OutputBuffer({ headBytes: 10_000, capacityBytes: 100_000 });
    const out = pattern(100_000, 4);
    write(buffer, "stdout", out);
    buffer.trimTo(1000);
    expect(buffer.headSnapshot("stdout").length).toBe(0);
    expect(buffer.retainedBytes).toBeLessThanOrEqual(1000);
    const tailFrom = buffer.retainedFrom.stdout;
    // To the byte: the newest chunk's front was cut, the chunk's bookkeeping counted.
    expect(tailFrom).toBe(99_064);
    expect(buffer.dropped()).toEqual([{ kind: "gap", stream: "stdout", offset: 0, missedBytes: 99_064 }]);
    expect(Buffer.from(buffer.snapshot("stdout")).equals(out.subarray(99_064))).toBe(true);
  });

  it("keeps the tail's last bytes to the byte, whatever the size of the writes", () => {
    const buffer = new OutputBuffer({ headBytes: 100, capacityBytes: 5000 + 64 });
    const out = pattern(300_000, 8);
    // One write larger than the whole tail: its front is cut, and nothing more.
    write(buffer, "stdout", out, 65_536);
    expect(buffer.retainedFrom.stdout).toBe(300_000 - 5000);
    expect(Buffer.from(buffer.snapshot("stdout")).equals(out.subarray(295_000))).toBe(true);
    expect(Buffer.from(buffer.headSnapshot("stdout")).equals(out.subarray(0, 100))).toBe(true);
  });

  it("discards heads and tail alike, and keeps what a pinned reader has not read", async () => {
    const buffer = new OutputBuffer({ headBytes: 3000, capacityBytes: 100_000, onBackpressure: () => {} });
    const pinned = buffer.createReader({}, { pinned: true });
    write(buffer, "stdout", pattern(20_000, 6), 1000);
    const items = pinned.items({ follow: false });
    // The head and the tail's first chunk read: only those may go (a chunk counts once the next is asked for).
    await items.next();
    await items.next();
    await items.next();
    const read = pinned.consumedOffsets.stdout;
    expect(read).toBeGreaterThan(3000);
    expect(read).toBeLessThan(20_000);
    buffer.discardRetained();
    expect(buffer.dropped()).toEqual([{ kind: "gap", stream: "stdout", offset: 0, missedBytes: read }]);
    const late = replay(await drain(buffer.createReader()), "stdout");
    expect(late.gaps).toEqual([[0, read]]);
    expect(late.bytes.equals(pattern(20_000, 6).subarray(read))).toBe(true);
    buffer.unpin(pinned);
    buffer.discardRetained();
    expect(buffer.retainedBytes).toBe(0);
    expect(buffer.dropped()).toEqual([{ kind: "gap", stream: "stdout", offset: 0, missedBytes: 20_000 }]);
  });
});
