import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ProcessError } from "../errors.js";
import { compileLogPattern, LineScanner, maxLineBytes, maxPatternLength } from "./log-pattern.js";

const bytes = (text: string) => new TextEncoder().encode(text);

/** Feeds `text` to a new scanner in pieces cut at `cuts`; returns the first match. */
function scanInPieces(pattern: string, text: string, cuts: number[]) {
  const scanner = new LineScanner(compileLogPattern(pattern), "stdout");
  const data = bytes(text);
  let start = 0;
  for (const cut of [...cuts, data.length]) {
    const found = scanner.feed(start, data.subarray(start, cut));
    if (found !== undefined) return found;
    start = cut;
  }
  return scanner.finish();
}

describe("LineScanner", () => {
  it("finds a match split across chunks wherever the chunk boundary falls, with the groups of the whole line", () => {
    const text = "booting\nready on port 8080\nmore\n";
    for (let cut = 1; cut < text.length; cut++) {
      const found = scanInPieces("port (\\d+)", text, [cut]);
      expect(found, `cut at ${cut}`).toMatchObject({ match: "port 8080", groups: ["8080"], offset: 17, lineOffset: 8 });
    }
    // One byte at a time.
    const bytewise = scanInPieces(
      "ready on (?<what>\\w+) (\\d+)",
      text,
      [...text].map((_, index) => index + 1),
    );
    expect(bytewise).toMatchObject({
      line: "ready on port 8080",
      namedGroups: { what: "port" },
      groups: ["port", "8080"],
    });
  });

  it("matches a line only once it is complete, so a growing number is not cut short", () => {
    const scanner = new LineScanner(compileLogPattern("port (\\d+)"), "stdout");
    expect(scanner.feed(0, bytes("port 80"))).toBeUndefined();
    expect(scanner.feed(7, bytes("80\n"))?.groups).toEqual(["8080"]);
  });

  it("drops a carriage return before the newline, and matches the last line without one at the end", () => {
    expect(scanInPieces("^ready$", "ready\r\n", [])?.line).toBe("ready");
    expect(scanInPieces("done$", "a\nall done", [])).toMatchObject({ line: "all done", lineOffset: 2, offset: 6 });
  });

  it("gives byte offsets of UTF-8 text, from the offset it starts at", () => {
    const scanner = new LineScanner(compileLogPattern("prêt"), "stderr", 100);
    const found = scanner.feed(100, bytes("déjà vu\nétat: prêt\n"));
    expect(found).toMatchObject({ stream: "stderr", lineOffset: 110, offset: 110 + bytes("état: ").length });
  });

  it("starts a new line after a gap: the part before it is lost, not joined to what follows", () => {
    const scanner = new LineScanner(compileLogPattern("^ab"), "stdout");
    expect(scanner.feed(0, bytes("a"))).toBeUndefined();
    scanner.restartAt(10);
    expect(scanner.feed(10, bytes("b\nab\n"))).toMatchObject({ lineOffset: 12 });
  });

  it("matches a line longer than the limit in pieces, holding no more than one", () => {
    const long = "x".repeat(maxLineBytes + 10);
    const found = scanInPieces("^x+READY$", `${long}READY\n`, [1000, maxLineBytes + 5]);
    // The second piece holds the last 10 x's and READY.
    expect(found).toMatchObject({ lineOffset: maxLineBytes, match: "xxxxxxxxxxREADY" });
  });
});

/** The first match a line-by-line reading of all of `data` finds, for comparison: offsets of lines by their newlines. */
function referenceMatch(pattern: string, data: Buffer) {
  const regexp = new RegExp(pattern);
  let lineOffset = 0;
  while (lineOffset <= data.length) {
    let end = data.indexOf(0x0a, lineOffset);
    const complete = end !== -1;
    if (!complete) end = data.length;
    if (!complete && end === lineOffset) return undefined;
    let bytes = data.subarray(lineOffset, end);
    if (bytes.at(-1) === 0x0d) bytes = bytes.subarray(0, -1);
    const line = bytes.toString("utf8");
    const found = regexp.exec(line);
    if (found !== null)
      return { line, lineOffset, offset: lineOffset + Buffer.byteLength(line.slice(0, found.index)), match: found[0] };
    lineOffset = end + 1;
  }
  return undefined;
}

describe("LineScanner against a line-by-line reading", () => {
  it("finds the same first match, line and byte offsets whatever the chunks (CRLF, invalid UTF-8, chunks larger than a piece)", () => {
    const word = fc.constantFrom("ready", "port 80", "é", "\r", "\n", "\r\n", "x", " ", "\xff", "€uro", "line");
    fc.assert(
      fc.property(
        fc.array(word, { maxLength: 60 }),
        fc.array(fc.nat({ max: 200 }), { maxLength: 8 }),
        fc.constantFrom("ready", "^port (\\d+)$", "é.*x", "^$", "line ready"),
        fc.integer({ min: 0, max: 2 }),
        (words, cuts, pattern, padding) => {
          // Padding of whole lines makes some chunks larger than a 64 KiB piece.
          const data = Buffer.concat([
            Buffer.from("z\n".repeat(padding * 20_000)),
            // "\xff" stands for a byte that is no UTF-8.
            ...words.map((word) => (word === "\xff" ? Buffer.from([0xff]) : Buffer.from(word))),
          ]);
          const expected = referenceMatch(pattern, data);
          const scanner = new LineScanner(compileLogPattern(pattern), "stdout");
          let start = 0;
          let found: ReturnType<LineScanner["feed"]>;
          for (const cut of [...cuts.map((at) => Math.min(data.length, start + at)), data.length]) {
            if (cut < start) continue;
            found ??= scanner.feed(start, data.subarray(start, cut));
            start = cut;
          }
          found ??= scanner.finish();
          expect(
            found === undefined
              ? undefined
              : { line: found.line, lineOffset: found.lineOffset, offset: found.offset, match: found.match },
          ).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("compileLogPattern", () => {
  const reasonOf = (pattern: string) => {
    try {
      compileLogPattern(pattern);
    } catch (error) {
      return { reason: (error as ProcessError).reason, metadata: (error as ProcessError).metadata };
    }
    return undefined;
  };

  it("refuses what cannot run in linear time, bad syntax, an empty pattern and one over the limit", () => {
    expect(reasonOf("(a)\\1")).toMatchObject({ reason: "PATTERN_INVALID", metadata: { field: "pattern" } });
    expect(reasonOf("(?<=a)b")?.metadata.error).toMatch(/linear/);
    expect(reasonOf("(unclosed")?.reason).toBe("PATTERN_INVALID");
    expect(reasonOf("")?.reason).toBe("PATTERN_INVALID");
    expect(reasonOf("a".repeat(maxPatternLength + 1))?.metadata).toMatchObject({ limit: String(maxPatternLength) });
    expect(reasonOf("a".repeat(maxPatternLength))).toBeUndefined();
  });

  it("runs a pattern that backtracks catastrophically elsewhere over a whole long line", () => {
    // (a+)+$ against a's and a final b takes the backtracking engine alone 2^n steps: hours for 30 000. The
    // linear engine takes over once it has backtracked too long.
    const scanner = new LineScanner(compileLogPattern("(a+)+$"), "stdout");
    expect(scanner.feed(0, bytes(`${"a".repeat(30_000)}b\n`))).toBeUndefined();
    expect(compileLogPattern("[Rr]eady").regexp.test("Ready")).toBe(true);
  });
});
