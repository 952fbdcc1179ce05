import { describe, expect, it } from "vitest";
import { StreamDecoder } from "./stream-decoder.js";

/** A deterministic pseudo-random source (xorshift32), so a failure can be replayed. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
}

/** Bytes that exercise UTF-8's edges: ASCII, every lead and continuation range, byte order marks, bytes never valid. */
const alphabet = [
  0x41, 0x0a, 0x00, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xed, 0xee, 0xef,
  0xbb, 0xf0, 0xf1, 0xf4, 0xf5, 0xff,
];
const samples = ["café", "€", "𝄞", "\ufeffbom", "日本語", "a\u0000b"].map((text) => Buffer.from(text));

/** Up to 40 bytes of the alphabet and the samples, in an order `next` picks. */
function randomBytes(next: () => number): Uint8Array {
  const parts: number[] = [];
  const length = Math.floor(next() * 40);
  while (parts.length < length) {
    if (next() < 0.3) parts.push(...samples[Math.floor(next() * samples.length)]!);
    else parts.push(alphabet[Math.floor(next() * alphabet.length)]!);
  }
  return Uint8Array.from(parts);
}

describe("StreamDecoder (UTF-8)", () => {
  it("gives exactly what an incremental TextDecoder gives, however the bytes are cut", () => {
    const next = random(0x5eed);
    for (let run = 0; run < 3000; run++) {
      const bytes = randomBytes(next);
      const reference = new TextDecoder("utf-8");
      const ours = new StreamDecoder("utf-8");
      let expected = "";
      let actual = "";
      // Cuts of 0 to 5 bytes: empty chunks too.
      for (let at = 0; at < bytes.length; ) {
        const end = Math.min(bytes.length, at + Math.floor(next() * 6));
        expected += reference.decode(bytes.subarray(at, end), { stream: true });
        actual += ours.decode("stdout", bytes.subarray(at, end));
        at = end;
      }
      expected += reference.decode();
      actual += ours.flush("stdout");
      if (actual !== expected) expect({ bytes: [...bytes], actual }).toEqual({ bytes: [...bytes], actual: expected });
    }
  });

  it("keeps each stream's cut character apart, and drops a byte order mark only at a stream's start", () => {
    const decoder = new StreamDecoder();
    const euro = Buffer.from("€");
    expect(decoder.decode("stdout", euro.subarray(0, 1))).toBe("");
    expect(decoder.decode("stderr", Buffer.from("\ufeffx"))).toBe("x");
    expect(decoder.decode("stderr", Buffer.from("\ufeffy"))).toBe("\ufeffy");
    expect(decoder.decode("stdout", euro.subarray(1))).toBe("€");
    expect(decoder.decode("stdout", euro.subarray(0, 2))).toBe("");
    expect(decoder.flush("stdout")).toBe("\ufffd");
  });

  it("decodes later what it would decode now, texts read in any order or not at all", () => {
    const next = random(0xdeca7);
    for (let run = 0; run < 2000; run++) {
      const bytes = randomBytes(next);
      const now = new StreamDecoder("utf-8");
      const later = new StreamDecoder("utf-8");
      const expected: string[] = [];
      const texts: Array<() => string> = [];
      for (let at = 0; at < bytes.length; ) {
        const end = Math.min(bytes.length, at + Math.floor(next() * 6));
        expected.push(now.decode("stdout", bytes.subarray(at, end)));
        texts.push(later.decodeLater("stdout", bytes.subarray(at, end)));
        at = end;
      }
      expect(later.flush("stdout")).toBe(now.flush("stdout"));
      // From the last to the first, every other one skipped, then all: each the same, however read.
      for (let index = texts.length - 1; index >= 0; index -= 2) expect(texts[index]!()).toBe(expected[index]);
      expect(texts.map((text) => text())).toEqual(expected);
    }
  });

  it("decodes other encodings at once", () => {
    const decoder = new StreamDecoder("utf-16le");
    const text = decoder.decodeLater("stdout", Buffer.from("hé", "utf16le").subarray(0, 3));
    expect(text()).toBe("h");
    expect(decoder.decodeLater("stdout", Buffer.from("hé", "utf16le").subarray(3))()).toBe("é");
  });
});
