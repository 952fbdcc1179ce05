/**
 * A client as a process of its own, for bench/figures/client-memory.ts: connects to a daemon with the
 * TypeScript SDK, runs `head -c BYTES /dev/zero` through one of its APIs, and prints one JSON line:
 * bytes received, output events (one per message; execStream only), its RSS before the run (after a warm-up) and the highest RSS during it, in bytes,
 * and the milliseconds the run took.
 *
 *     node client-stream.mjs <url> execStream|exec <bytes>
 *
 * `execStream` iterates the events and drops each (what a user streaming output to a file does);
 * `exec` waits for the whole result and reads its stdout text and bytes (what a user of exec() does).
 */
import { readFileSync } from "node:fs";
import { connect } from "../src/client/index.js";

const [url, api, bytesText] = process.argv.slice(2);
if (url === undefined || (api !== "execStream" && api !== "exec")) {
  process.stderr.write("usage: client-stream <url> execStream|exec <bytes>\n");
  process.exit(2);
}
const bytes = Number(bytesText ?? 0);
/** Output events of the last run: one per output message the daemon sent. */
let events = 0;

/** VmRSS of this process, in bytes. */
function rssBytes(): number {
  const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync("/proc/self/status", "utf8"));
  return match === null ? 0 : Number(match[1]) * 1024;
}

async function run(sandbox: Awaited<ReturnType<typeof connect>>, count: number): Promise<number> {
  const command = `head -c ${count} /dev/zero`;
  if (api === "exec") {
    const result = await sandbox.exec(command);
    // What a user reads of a result: its text and its bytes.
    return result.stdout.length === result.stdoutBytes.length ? result.stdoutBytes.length : -1;
  }
  let received = 0;
  for await (const event of sandbox.execStream(command)) {
    if (event.type === "stdout") {
      received += event.bytes?.length ?? 0;
      events++;
    }
    if (event.type === "error") throw event.error;
  }
  return received;
}

const sandbox = await connect({ baseUrl: url, timeoutMs: 0, acceptCompression: false });
// Warm-up: the code paths compiled and the connection's windows open before the figure starts.
await run(sandbox, 4 * 1024 * 1024);
await new Promise((resolve) => setTimeout(resolve, 300));
const baseRss = rssBytes();
let peakRss = baseRss;
const sampler = setInterval(() => (peakRss = Math.max(peakRss, rssBytes())), 20);
events = 0;
const began = performance.now();
const received = await run(sandbox, bytes);
const ms = performance.now() - began;
clearInterval(sampler);
peakRss = Math.max(peakRss, rssBytes());
await sandbox.close();
process.stdout.write(`${JSON.stringify({ bytes: received, events, baseRss, peakRss, ms })}\n`);
process.exit(0);
