import { setFlagsFromString } from "node:v8";
import { ProcessError } from "../errors.js";
import type { OutputStreamName } from "../output/index.js";

/** Most characters a log pattern may have. */
export const maxPatternLength = 4096;

/** A line longer than this many bytes is matched in pieces of this size. */
export const maxLineBytes = 64 * 1024;

/**
 * Whether V8's linear-time regular expression engine guards every log pattern. V8 runs a pattern
 * on its usual backtracking engine (compiled to machine code, about 1 µs a line) and, with
 * `--enable-experimental-regexp-engine-on-excessive-backtracks`, moves that one match to its
 * linear-time engine once it has backtracked 50,000 times: a pattern such as `(a+)+$`, which
 * backtracks for hours over a long line, costs milliseconds. The linear engine alone would be safe
 * too, but runs about ten times slower (10 µs a line, measured). Both flags are read when a
 * pattern is compiled or run, so they are turned on here, once, at run time. A pattern the linear
 * engine cannot run (backreferences, lookaround: compiling it with the `l` flag fails) has no such
 * guard and is refused.
 */
const linearEngine: boolean = (() => {
  try {
    setFlagsFromString("--enable-experimental-regexp-engine");
    setFlagsFromString("--enable-experimental-regexp-engine-on-excessive-backtracks");
    // biome-ignore lint/complexity/useRegexLiterals: a literal with V8's own flag would not even parse.
    new RegExp("a", "l");
    return true;
  } catch {
    return false;
  }
})();

/**
 * The longest piece of a line matched when the linear engine is missing (a future Node without
 * it): the backtracking engine then only ever sees short input, so a pathological pattern costs
 * less (though not little).
 */
const backtrackingLineBytes = 1024;

/** A compiled log pattern: the regular expression and the longest piece of a line it is run on. */
export interface LogPattern {
  /** The expression, without flags (it is run with `exec` from the start of each line). */
  readonly regexp: RegExp;
  /** Bytes of a line matched at once: {@link maxLineBytes}, less without the linear engine. */
  readonly pieceBytes: number;
}

/**
 * Compiles a log pattern (JavaScript syntax, no flags), checking that the linear-time engine can
 * run it (see {@link linearEngine}). Throws a ProcessError PATTERN_INVALID (metadata `field`,
 * `error`, and `limit` when too long) for an empty pattern, one longer than
 * {@link maxPatternLength}, a syntax error or a construct that cannot run in linear time. The
 * linear engine takes no `i` or `u` flag (V8 refuses them with `l` in Node 20 to 24), so there is no
 * case-insensitive mode: a pattern spells the cases out.
 */
export function compileLogPattern(pattern: string): LogPattern {
  const invalid = (error: string, extra: Record<string, string> = {}) =>
    new ProcessError(`invalid log pattern: ${error}`, "PATTERN_INVALID", {
      metadata: { field: "pattern", error, ...extra },
    });
  if (pattern === "") throw invalid("the pattern is empty");
  if (pattern.length > maxPatternLength)
    throw invalid(`the pattern has ${pattern.length} characters, more than ${maxPatternLength}`, {
      limit: String(maxPatternLength),
    });
  try {
    // Compiled with `l` only to know the linear engine can take over from the one that runs it.
    if (linearEngine) new RegExp(pattern, "l");
    return { regexp: new RegExp(pattern), pieceBytes: linearEngine ? maxLineBytes : backtrackingLineBytes };
  } catch (error) {
    // "Invalid regular expression: /(a)\1/l: Cannot be executed in linear time": the last part says why.
    const message = (error as Error).message;
    throw invalid(message.slice(message.lastIndexOf(": ") + 2) || message);
  }
}

/** The first match of a log pattern in a process's output. */
export interface LogMatch {
  /** The stream the line came from. */
  readonly stream: OutputStreamName;
  /** Byte offset of the match's first byte within its stream (exact for UTF-8 text). */
  readonly offset: number;
  /** The whole line (or piece of a long line) without its line ending. */
  readonly line: string;
  /** Byte offset of the line's first byte within its stream. */
  readonly lineOffset: number;
  /** The text that matched. */
  readonly match: string;
  /** The capture groups in order, undefined where a group took no part. */
  readonly groups: readonly (string | undefined)[];
  /** The named capture groups that took part in the match. */
  readonly namedGroups: Readonly<Record<string, string>>;
}

const newline = 0x0a;
const carriageReturn = 0x0d;

/**
 * LineScanner matches a log pattern against the lines of one output stream as its bytes arrive,
 * whatever the chunks: a line split across writes is joined before it is matched, so a match is
 * never missed at a chunk boundary and its groups are those of the whole line. A line is matched
 * once its newline arrives (a trailing carriage return is dropped, as a terminal writes `\r\n`),
 * a line longer than the pattern's piece size in pieces of that size, and the last line without a
 * newline when the output ends ({@link finish}). Holds at most one piece of a line.
 */
export class LineScanner {
  private parts: Uint8Array[] = [];
  private partBytes = 0;
  /** Offset of the first byte of the line being gathered. */
  private lineOffset: number;
  /** Offset the next byte is expected at; another means bytes were skipped (a gap). */
  private nextOffset: number;

  /** Creates a scanner of `stream` whose first byte is at `from`. */
  constructor(
    private readonly pattern: LogPattern,
    readonly stream: OutputStreamName,
    from = 0,
  ) {
    this.lineOffset = from;
    this.nextOffset = from;
  }

  /** Feeds bytes at `offset`; returns the first match among the lines they complete, if any. */
  feed(offset: number, data: Uint8Array): LogMatch | undefined {
    if (offset !== this.nextOffset) this.restartAt(offset);
    this.nextOffset = offset + data.length;
    let start = 0;
    let found: LogMatch | undefined;
    if (this.partBytes > 0) {
      // The line gathered so far goes on to its newline.
      const first = data.indexOf(newline);
      start = first === -1 ? data.length : first + 1;
      found = this.feedBytes(data, 0, start);
    }
    while (found === undefined && start < data.length) {
      // Complete lines within a piece's length are decoded at once and matched as string slices
      // (ten times faster than a line at a time); a longer line, and the last one, are gathered.
      const cut = data.lastIndexOf(newline, Math.min(data.length - 1, start + this.pattern.pieceBytes));
      if (cut >= start) {
        found = this.matchLines(data, start, cut);
        start = cut + 1;
        continue;
      }
      const next = data.indexOf(newline, start);
      const end = next === -1 ? data.length : next + 1;
      found = this.feedBytes(data, start, end);
      start = end;
    }
    return found;
  }

  /** Gathers `data` from `start` to `end` into lines, matching each one (or piece) it completes. */
  private feedBytes(data: Uint8Array, start: number, end: number): LogMatch | undefined {
    while (start < end) {
      const next = data.indexOf(newline, start);
      const lineEnd = next === -1 || next >= end ? -1 : next;
      const stop = lineEnd === -1 ? end : lineEnd;
      // Never gather more than a piece: a line without a newline for megabytes stays bounded.
      const room = this.pattern.pieceBytes - this.partBytes;
      if (stop - start > room || (stop - start === room && lineEnd === -1)) {
        this.gather(data.subarray(start, start + room));
        const found = this.matchLine(false);
        if (found !== undefined) return found;
        start += room;
        continue;
      }
      this.gather(data.subarray(start, stop));
      if (lineEnd === -1) break;
      const found = this.matchLine(true);
      if (found !== undefined) return found;
      // The newline belongs to no line.
      this.lineOffset += 1;
      start = lineEnd + 1;
    }
    return undefined;
  }

  /**
   * Matches the complete lines of `data` from `start` to the newline at `last`, none longer than a
   * piece, nothing gathered before them; the next line starts after `last`.
   */
  private matchLines(data: Uint8Array, start: number, last: number): LogMatch | undefined {
    const base = this.lineOffset;
    this.lineOffset = base + last + 1 - start;
    const block = Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8", start, last);
    let lines = 0;
    for (let index = 0; index <= block.length; lines++) {
      let end = block.indexOf("\n", index);
      if (end === -1) end = block.length;
      const line = block.charCodeAt(end - 1) === carriageReturn ? block.slice(index, end - 1) : block.slice(index, end);
      const found = this.pattern.regexp.exec(line);
      if (found !== null) {
        // Newlines are never part of a UTF-8 sequence nor made by decoding: counting them finds the line's bytes.
        let lineStart = start;
        for (let seen = 0; seen < lines; seen++) lineStart = data.indexOf(newline, lineStart) + 1;
        return this.toMatch(found, line, base + lineStart - start);
      }
      index = end + 1;
    }
    return undefined;
  }

  /** Output the reader asked for was dropped: the line being gathered is lost, the next starts at `offset`. */
  restartAt(offset: number): void {
    this.parts = [];
    this.partBytes = 0;
    this.lineOffset = offset;
    this.nextOffset = offset;
  }

  /** The output ended: matches the last line, which has no newline. */
  finish(): LogMatch | undefined {
    return this.partBytes > 0 ? this.matchLine(true) : undefined;
  }

  private gather(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    this.parts.push(bytes);
    this.partBytes += bytes.length;
  }

  /** Matches the gathered bytes as one line and starts the next line after them. */
  private matchLine(complete: boolean): LogMatch | undefined {
    let bytes = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts);
    const lineOffset = this.lineOffset;
    this.lineOffset += bytes.length;
    this.parts = [];
    this.partBytes = 0;
    if (complete && bytes.at(-1) === carriageReturn) bytes = bytes.subarray(0, -1);
    const line = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
    const found = this.pattern.regexp.exec(line);
    return found === null ? undefined : this.toMatch(found, line, lineOffset);
  }

  private toMatch(found: RegExpExecArray, line: string, lineOffset: number): LogMatch {
    return {
      stream: this.stream,
      offset: lineOffset + Buffer.byteLength(line.slice(0, found.index)),
      line,
      lineOffset,
      match: found[0],
      groups: found.slice(1),
      namedGroups: Object.fromEntries(
        Object.entries(found.groups ?? {}).filter((entry): entry is [string, string] => entry[1] !== undefined),
      ),
    };
  }
}
