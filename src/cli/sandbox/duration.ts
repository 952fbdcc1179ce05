import { InvalidArgumentError } from "commander";
import { maxTimeoutMs } from "../../shared/limits.js";

const unitMilliseconds: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * Parses a duration as kubectl and Go write one (`90s`, `1m30s`, `1.5h`, `250ms`), or a plain
 * number of seconds (`30`), into milliseconds (rounded up, so a small limit never becomes none).
 * `0` means no limit. Throws commander's InvalidArgumentError, which names the option, when the
 * text is not a duration or exceeds {@link maxTimeoutMs}.
 */
export function parseDuration(text: string): number {
  const trimmed = text.trim();
  let milliseconds: number;
  if (/^\d+(\.\d+)?$/.test(trimmed)) {
    milliseconds = Number(trimmed) * 1000;
  } else {
    const parts = [...trimmed.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
    if (parts.length === 0 || parts.map((part) => part[0]).join("") !== trimmed) {
      throw new InvalidArgumentError("not a duration: write it as 30s, 1m30s, 1.5h, 250ms or a number of seconds");
    }
    milliseconds = parts.reduce((sum, part) => sum + Number(part[1]) * unitMilliseconds[part[2]], 0);
  }
  const rounded = Math.ceil(milliseconds);
  if (rounded > maxTimeoutMs) throw new InvalidArgumentError(`at most ${maxTimeoutMs} ms (about 24 days)`);
  return rounded;
}
