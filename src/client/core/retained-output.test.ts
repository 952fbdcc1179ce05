import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { CommandFinished } from "./command-finished.js";
import type { OutputChunk } from "./output.js";
import type { ProcessExit } from "./process-record.js";
import { RetainedOutput } from "./retained-output.js";

/** V8's full collection, made callable without the --expose-gc flag. */
function collectGarbage(): void {
  setFlagsFromString("--expose-gc");
  (runInNewContext("gc") as () => void)();
}

const chunk = (stream: OutputChunk["stream"], offset: number, text: string): OutputChunk => ({
  stream,
  offset,
  data: Buffer.from(text),
});

describe("RetainedOutput", () => {
  it("keeps the last bytes up to its limit, cutting the front of a chunk larger than the limit", () => {
    const output = new RetainedOutput(10);
    output.push(chunk("stdout", 0, "abcdef"));
    output.push(chunk("stdout", 6, "0123456789XYZ"));
    const kept = output.retained();
    expect(kept.map((each) => [each.offset, Buffer.from(each.data).toString()])).toEqual([[9, "3456789XYZ"]]);
    expect(output.droppedBytes).toEqual({ stdout: 9, stderr: 0 });
    expect(output.gaps).toEqual([{ stream: "stdout", offset: 0, missedBytes: 9 }]);
    output.push(chunk("stderr", 0, "ab"));
    expect(output.retained().map((each) => Buffer.from(each.data).toString())).toEqual(["56789XYZ", "ab"]);
    expect(output.gaps).toEqual([{ stream: "stdout", offset: 0, missedBytes: 11 }]);
  });

  it("lets go of the bytes of a chunk it dropped (a stream that keeps nothing holds nothing)", async () => {
    const retained = new RetainedOutput(0);
    // Held only through a weak reference from here on: the buffer must be collectable once dropped.
    let first: Buffer | undefined = Buffer.alloc(1024 * 1024, 1);
    const watched = new WeakRef(first);
    retained.push({ stream: "stdout", offset: 0, data: first });
    first = undefined;
    for (let index = 1; index <= 10; index++) retained.push(chunk("stdout", 1024 * 1024 + index - 1, "x"));
    expect(retained.retained()).toEqual([]);
    expect(retained.droppedBytes).toEqual({ stdout: 1024 * 1024 + 10, stderr: 0 });
    // A WeakRef holds its target until the job that created it ends.
    await new Promise((resolve) => setImmediate(resolve));
    collectGarbage();
    expect(watched.deref()).toBeUndefined();
  });
});

describe("RetainedOutput.shareWith", () => {
  it("holds the views it is given in place of the chunks, the same bytes at the same offsets", () => {
    const retained = new RetainedOutput(Number.POSITIVE_INFINITY);
    retained.push(chunk("stdout", 0, "ab"));
    retained.push(chunk("stderr", 0, "c"));
    const finished = new CommandFinished(
      "p",
      "c",
      { status: "completed", exitCode: 0 } as ProcessExit,
      retained.retained(),
    );
    retained.shareWith(finished.chunks);
    expect(retained.retained()).toEqual(finished.chunks);
    expect(retained.retained()[0]!.data.buffer).toBe(finished.stdoutBytes().buffer);
    expect(() => retained.shareWith([])).toThrow();
  });
});

describe("CommandFinished", () => {
  const exit = { status: "completed", exitCode: 0 } as ProcessExit;

  it("holds each stream's output once: its chunks are views of the stream's bytes", () => {
    const finished = new CommandFinished("p", "c", exit, [
      chunk("stdout", 0, "one "),
      chunk("stderr", 0, "warn"),
      chunk("stdout", 4, "two"),
    ]);
    expect(finished.stdout()).toBe("one two");
    expect(finished.stderr()).toBe("warn");
    expect(finished.output()).toBe("one warntwo");
    const stdout = finished.stdoutBytes();
    expect(stdout.toString()).toBe("one two");
    expect(finished.chunks.map((c) => c.data.toString())).toEqual(["one ", "warn", "two"]);
    for (const c of finished.chunks.filter((c) => c.stream === "stdout")) expect(c.data.buffer).toBe(stdout.buffer);
    expect(finished.stdoutBytes()).toBe(stdout);
  });

  it("decodes a character split across chunks whole, and output is stdout's text when stderr is empty", () => {
    const bytes = Buffer.from("café");
    const finished = new CommandFinished("p", "c", exit, [
      { stream: "stdout", offset: 0, data: bytes.subarray(0, 4) },
      { stream: "stdout", offset: 4, data: bytes.subarray(4) },
    ]);
    expect(finished.stdout()).toBe("café");
    expect(finished.output()).toBe("café");
    expect(finished.stderr()).toBe("");
  });
});
