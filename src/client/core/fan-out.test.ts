import { describe, expect, it } from "vitest";
import { ChunkQueue } from "./chunk-queue.js";
import { FanOut } from "./fan-out.js";

/** Whether `promise` has settled after the microtasks and one turn of the loop now pending. */
async function hasSettled(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  void promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

describe("ChunkQueue", () => {
  it("holds the producer back once full and lets it go when the consumer takes an item", async () => {
    const queue = new ChunkQueue<string>(2);
    expect(await hasSettled(queue.push("a"))).toBe(true);
    const second = queue.push("b");
    expect(await hasSettled(second)).toBe(false);
    const reading = queue[Symbol.asyncIterator]();
    expect(await reading.next()).toEqual({ value: "a", done: false });
    expect(await hasSettled(second)).toBe(true);
  });

  it("measures items by sizeOf, hands over what is queued before the end, then the end's error", async () => {
    const queue = new ChunkQueue<Uint8Array>(4, (item) => item.length);
    expect(await hasSettled(queue.push(new Uint8Array(3)))).toBe(true);
    expect(await hasSettled(queue.push(new Uint8Array(1)))).toBe(false);
    queue.end(new Error("lost"));
    const seen: number[] = [];
    await expect(
      (async () => {
        for await (const item of queue) seen.push(item.length);
      })(),
    ).rejects.toThrow("lost");
    expect(seen).toEqual([3, 1]);
  });

  it("releases a waiting producer when the consumer leaves early", async () => {
    const queue = new ChunkQueue<number>(1);
    const waiting = queue.push(1);
    for await (const _ of queue) break;
    expect(await hasSettled(waiting)).toBe(true);
    expect(await hasSettled(queue.push(2))).toBe(true);
  });
});

describe("FanOut", () => {
  it("hands every item to each subscriber in order, replay first, and waits for the slowest", async () => {
    const fanOut = new FanOut<number>(1, () => 1);
    const fast = fanOut.subscribe([0]);
    const slow = fanOut.subscribe([]);
    expect(await fast.next()).toEqual({ value: 0, done: false });
    const first = fanOut.publish(1);
    expect(await fast.next()).toEqual({ value: 1, done: false });
    // The slow subscriber has not taken item 1: the producer is held back.
    expect(await hasSettled(first)).toBe(false);
    expect(await slow.next()).toEqual({ value: 1, done: false });
    expect(await hasSettled(first)).toBe(true);
    fanOut.close();
    expect(await fast.next()).toEqual({ value: undefined, done: true });
    expect(await slow.next()).toEqual({ value: undefined, done: true });
  });

  it("lets the producer go when a subscriber leaves, even one still replaying", async () => {
    const fanOut = new FanOut<number>(1, () => 1);
    const leaving = fanOut.subscribe([7, 8]);
    expect(await leaving.next()).toEqual({ value: 7, done: false });
    const held = fanOut.publish(1);
    expect(await hasSettled(held)).toBe(false);
    await leaving.return(undefined);
    expect(await hasSettled(held)).toBe(true);
  });

  it("gives a subscriber that comes after the end the replay, then the end's error", async () => {
    const fanOut = new FanOut<number>(4, () => 1);
    fanOut.close(new Error("no exit"));
    const late = fanOut.subscribe([5]);
    expect(await late.next()).toEqual({ value: 5, done: false });
    await expect(late.next()).rejects.toThrow("no exit");
  });
});
