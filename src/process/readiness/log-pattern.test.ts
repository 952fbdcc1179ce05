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
    // (a+)+$ against a's and a final b takes the backtracking engine 2^n steps: hours for 30 000.
    const scanner = new LineScanner(compileLogPattern("(a+)+$"), "stdout");
    expect(scanner.feed(0, bytes(`${"a".repeat(30_000)}b\n`))).toBeUndefined();
    expect(compileLogPattern("[Rr]eady").regexp.test("Ready")).toBe(true);
  });
});
