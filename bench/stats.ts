/** The value below which `fraction` (0..1) of the samples fall (nearest rank); NaN when empty. */
export function percentile(samples: readonly number[], fraction: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(fraction * sorted.length) - 1));
  return sorted[rank];
}

/** Milliseconds taken by `operation`, with sub-millisecond precision. */
export async function timeMs(operation: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await operation();
  return performance.now() - start;
}

/**
 * Runs `operation` `count` times with at most `concurrency` in flight; resolves with the elapsed
 * milliseconds of the whole run.
 */
export async function runConcurrently(
  count: number,
  concurrency: number,
  operation: (index: number) => Promise<unknown>,
): Promise<number> {
  let next = 0;
  const start = performance.now();
  const worker = async () => {
    while (next < count) await operation(next++);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return performance.now() - start;
}

/** Megabytes (10^6 bytes) per second. */
export function megabytesPerSecond(bytes: number, elapsedMs: number): number {
  return bytes / 1e6 / (elapsedMs / 1000);
}

/** Polls `condition` every `intervalMs` until it holds or `timeoutMs` passed; resolves with whether it held. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  intervalMs = 20,
): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (performance.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
