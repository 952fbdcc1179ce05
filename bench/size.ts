/** How much work each figure does; {@link fullSize} is the issue's, {@link quickSize} a smoke run. */
export interface BenchSize {
  /** Name shown in results.json. */
  mode: "full" | "quick";
  /** Sequential exec("true") calls timed (after a warm-up). */
  sequentialCalls: number;
  /** Execs timed each after half a second without calls (the first call after a pause). */
  idleCalls: number;
  /** Calls in the concurrent exec figure, and callers in flight. */
  concurrentCalls: number;
  concurrency: number;
  /** Bytes `head -c` writes through Exec. */
  execBytes: number;
  /** StreamLogs readers following one process (one of them stalled), and bytes it writes. */
  fanoutReaders: number;
  fanoutBytes: number;
  /** Background `sleep` processes started, listed and killed. */
  scaleProcesses: number;
  /** Execs run before the daemon's memory is read again. */
  memoryExecs: number;
  /** Daemon starts timed (median taken). */
  startRuns: number;
  /** Sequential authenticated execs timed during each flood (and before it), and the flood's shape. */
  floodCalls: number;
  floodConnections: number;
  floodStreams: number;
  /** Calls ghz makes. */
  ghzCalls: number;
  ghzConcurrency: number;
  /** Bytes of the file moved up and down through the file service. */
  fileBytes: number;
  /** Bytes a client process streams (execStream, exec_stream) while its RSS is watched. */
  clientStreamBytes: number;
  /** Bytes a client process receives through exec(), which keeps the whole result. */
  clientExecBytes: number;
  /** Bytes streamed through the frame-counting proxy. */
  clientFrameBytes: number;
}

/** The sizes of issue 5. */
export const fullSize: BenchSize = {
  mode: "full",
  sequentialCalls: 300,
  idleCalls: 12,
  concurrentCalls: 800,
  concurrency: 16,
  execBytes: 1024 ** 3,
  fanoutReaders: 32,
  fanoutBytes: 64 * 1024 ** 2,
  scaleProcesses: 1000,
  memoryExecs: 3000,
  startRuns: 5,
  floodCalls: 200,
  floodConnections: 100,
  floodStreams: 272,
  ghzCalls: 2000,
  ghzConcurrency: 50,
  fileBytes: 1024 ** 3,
  clientStreamBytes: 1024 ** 3,
  clientExecBytes: 256 * 1024 ** 2,
  clientFrameBytes: 64 * 1024 ** 2,
};

/** Tiny counts, for the smoke test and a first look (a few seconds per figure). */
export const quickSize: BenchSize = {
  mode: "quick",
  sequentialCalls: 20,
  idleCalls: 2,
  concurrentCalls: 32,
  concurrency: 16,
  execBytes: 8 * 1024 ** 2,
  fanoutReaders: 4,
  fanoutBytes: 4 * 1024 ** 2,
  scaleProcesses: 20,
  memoryExecs: 50,
  startRuns: 1,
  floodCalls: 10,
  floodConnections: 4,
  floodStreams: 16,
  ghzCalls: 100,
  ghzConcurrency: 50,
  fileBytes: 8 * 1024 ** 2,
  clientStreamBytes: 16 * 1024 ** 2,
  clientExecBytes: 8 * 1024 ** 2,
  clientFrameBytes: 8 * 1024 ** 2,
};
