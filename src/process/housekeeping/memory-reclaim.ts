import v8 from "node:v8";
import { runInNewContext } from "node:vm";
import { loadNativeAddon } from "../native/index.js";

/**
 * Gives memory back to the system after work: V8's low-memory collection, and a moment later the
 * allocator's free memory returned (malloc_trim, with the native addon). V8 collects for its own
 * needs while the daemon works, but not after: the young generation stays at its largest and the
 * old one keeps the pages the calls filled, so a daemon idle after 3,000 execs held 135 MB where the
 * collection leaves 75 MB (docs/PERFORMANCE.md).
 */

/** Output and input bytes released before a collection is worth its cost (a full GC takes milliseconds). */
const collectAfterReleasedBytes = 16 * 1024 * 1024;
/** Processes started before a collection is worth it, once the daemon is quiet. */
const collectAfterStarts = 100;
/** Time without a process start after which the daemon counts as quiet. */
const quietMs = 1000;
/** Delay between the first collection and the second, which compacts what the first left sparse. */
const compactDelayMs = 500;
/** Delay between the collection and the trim: buffers are freed by the collector's callbacks after it returns. */
const trimDelayMs = 100;

let releasedBytes = 0;
let releaseTimer: NodeJS.Timeout | undefined;
let startsSinceCollection = 0;
let lastStartMs = 0;
let quietTimer: NodeJS.Timeout | undefined;
let collections = 0;
let collectGarbage: (() => void) | undefined;
let reclaimAfterBursts = false;

/**
 * Notes that `bytes` of buffered output or input were released (records cleaned up, output dropped,
 * the stdin messages of a call that ended) and, once 16 MiB have been, collects and trims, at most
 * once a second. Without both, the buffers wait for a
 * collection the small JS heap does not ask for, and then stay in glibc's arenas: RSS 552 MB after
 * cleaning up 480 MB of output. A no-op without the addon, whose trim is what gives this memory back.
 */
export function releaseBufferedMemory(bytes: number): void {
  releasedBytes += bytes;
  if (releaseTimer !== undefined || releasedBytes < collectAfterReleasedBytes || loadNativeAddon() === null) return;
  releaseTimer = setTimeout(() => {
    releaseTimer = undefined;
    collectAndTrim();
  }, 1000);
  releaseTimer.unref();
}

/**
 * Notes that a process started. Once 100 have since the last collection, the daemon collects as
 * soon as no process has started for a second: after a burst of commands, not in the middle of one
 * (a command still streaming output may see the pause). Only after {@link reclaimMemoryAsDaemon}.
 */
export function noteProcessStarted(): void {
  if (!reclaimAfterBursts) return;
  startsSinceCollection++;
  lastStartMs = performance.now();
  if (quietTimer === undefined && startsSinceCollection >= collectAfterStarts) waitForQuiet(quietMs);
}

/**
 * Turns the daemon's reclaims on: one `delayMs` after it serves, for what starting it left behind
 * (loading and compiling its modules, building its services: idle RSS 67.6 -> 62.9 MB), and one
 * after each burst of process starts ({@link noteProcessStarted}). For the daemon's own process
 * (src/cli/sandboxd/daemon.ts), not for an embedder of the server, whose other work may not want the pause.
 */
export function reclaimMemoryAsDaemon(delayMs = 200): void {
  reclaimAfterBursts = true;
  setTimeout(collectAndTrim, delayMs).unref();
}

/** Collections run to give memory back since the daemon started (the `sandboxd_memory_reclaims_total` metric). */
export function memoryReclaims(): number {
  return collections;
}

/** Re-checks after `delayMs` whether the daemon has been quiet for {@link quietMs}; one timer, re-armed at most once a second. */
function waitForQuiet(delayMs: number): void {
  quietTimer = setTimeout(() => {
    const quietFor = performance.now() - lastStartMs;
    if (quietFor < quietMs) {
      waitForQuiet(quietMs - quietFor);
      return;
    }
    quietTimer = undefined;
    // A collection for released output may have run meanwhile and started the count again.
    if (startsSinceCollection >= collectAfterStarts) collectAndTrim();
  }, delayMs);
  quietTimer.unref();
}

/**
 * Collects and trims. With the addon: V8's low-memory collection (node::LowMemoryNotification), full
 * collections until nothing more is freed, which also compact the old generation and shrink the
 * young one back; then the trim. Without it: two full collections half a second apart (the second,
 * once the first's sweeping is done, compacts the pages the first left sparse), which leave the
 * young generation at its largest. 5 s after 3,000 execs: one collection RSS 135 -> 105 MB, two
 * -> 85 MB, the low-memory collection -> 75-76 MB (idle 67.6). It holds the loop 30-70 ms, once per
 * burst, after a quiet second.
 */
function collectAndTrim(): void {
  releasedBytes = 0;
  startsSinceCollection = 0;
  collections++;
  const native = loadNativeAddon();
  if (native?.lowMemory()) {
    setTimeout(() => native.trimMemory(), trimDelayMs).unref();
    return;
  }
  garbageCollector()();
  setTimeout(() => {
    garbageCollector()();
    setTimeout(() => loadNativeAddon()?.trimMemory(), trimDelayMs).unref();
  }, compactDelayMs).unref();
}

/** Bytes a transfer moves between two young-generation collections (see {@link noteBytesMoved}). */
const collectYoungEveryBytes = 8 * 1024 * 1024;
let movedSinceYoungCollection = 0;

/**
 * Notes that `bytes` of a transfer went through the daemon and, every 8 MiB, collects the young
 * generation. Each piece a socket or a file gives the daemon is a buffer outside V8's heap, held by
 * a small object in the young generation; V8 collects for the size of its own heap, so without this
 * the buffers of a 1 GiB upload piled up by tens of MiB between collections.
 */
export function noteBytesMoved(bytes: number): void {
  movedSinceYoungCollection += bytes;
  if (movedSinceYoungCollection < collectYoungEveryBytes) return;
  movedSinceYoungCollection = 0;
  youngCollector()();
}

let collectYoung: (() => void) | undefined;

/** V8's young-generation collection (gc({ type: "minor" }) of the --expose-gc flag, set late). */
function youngCollector(): () => void {
  if (collectYoung === undefined) {
    const gc = garbageCollector() as (options?: { type: "minor" | "major" }) => void;
    collectYoung = () => gc({ type: "minor" });
  }
  return collectYoung;
}

/** V8's full collection, exposed at run time (the documented --expose-gc flag, set late). */
function garbageCollector(): () => void {
  if (collectGarbage === undefined) {
    v8.setFlagsFromString("--expose-gc");
    collectGarbage = runInNewContext("gc") as () => void;
  }
  return collectGarbage;
}
