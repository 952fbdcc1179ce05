import { ProcessError } from "./errors.js";

/**
 * OutputRetention is how much of a process's output its record keeps: the first `headBytes` of
 * each stream (its head) and the last `tailBytes` of both streams together (the tail), with at most
 * one gap per stream between them. Bytes.
 */
export interface OutputRetention {
  /** Bytes kept from the start of each stream, stdout and stderr each. */
  readonly headBytes: number;
  /** Bytes kept from the end of the output, both streams together in arrival order, beyond each stream's head. */
  readonly tailBytes: number;
}

/** What a request may ask of {@link OutputRetention}: either size, or none (the daemon's defaults). */
export interface RetentionRequest {
  /** Bytes kept from the start of each stream. */
  headBytes?: number;
  /** Bytes kept from the end of the output. */
  tailBytes?: number;
}

/** The daemon's bounds on {@link OutputRetention}. */
export interface RetentionLimits {
  /** What one process may retain: both heads and the tail together (`--max-output-bytes`). */
  maxOutputBytes: number;
  /** The head of a request that names none (`--output-head-bytes`); at most a quarter of `maxOutputBytes` is used. */
  defaultHeadBytes: number;
}

/** Default {@link RetentionLimits.defaultHeadBytes}: 64 KiB of each stream. */
export const defaultOutputHeadBytes = 64 * 1024;

/**
 * Resolves a request's retention within the daemon's limits: an unset head is the default head (less
 * when the tail asked for leaves less room), an unset tail is what the limit leaves after both
 * heads. Refuses with a ProcessError (RETENTION_ABOVE_LIMIT, an invalid argument naming
 * `max-output-bytes`) sizes whose two heads and tail together exceed the limit.
 */
export function resolveRetention(request: RetentionRequest | undefined, limits: RetentionLimits): OutputRetention {
  const max = limits.maxOutputBytes;
  const defaultHead = Math.min(limits.defaultHeadBytes, Math.floor(max / 4));
  const { headBytes, tailBytes } = request ?? {};
  for (const [field, value] of [
    ["retention.head_bytes", headBytes],
    ["retention.tail_bytes", tailBytes],
  ] as const) {
    if (value === undefined) continue;
    if (!(value >= 0) || (Number.isFinite(value) && !Number.isInteger(value))) {
      throw new ProcessError(`${field} must be a whole number of bytes, got ${value}`, "INVALID_ARGUMENT", {
        metadata: { field },
      });
    }
    if (value > max) throw aboveLimit(`${field} of ${value} bytes`, field, max);
  }
  const head =
    headBytes ??
    (tailBytes === undefined ? defaultHead : Math.max(0, Math.min(defaultHead, Math.floor((max - tailBytes) / 2))));
  const tail = tailBytes ?? Math.max(0, max - 2 * head);
  if (2 * head + tail > max) {
    const field = tailBytes === undefined ? "retention.head_bytes" : "retention";
    throw aboveLimit(
      `retention of ${head} head bytes per stream and ${tail} tail bytes (${2 * head + tail} in all)`,
      field,
      max,
    );
  }
  return { headBytes: head, tailBytes: tail };
}

function aboveLimit(what: string, field: string, max: number): ProcessError {
  return new ProcessError(`${what} is above the daemon's max-output-bytes of ${max}`, "RETENTION_ABOVE_LIMIT", {
    metadata: { field, limit: "max-output-bytes", value: String(max) },
  });
}
