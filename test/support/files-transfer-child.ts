// A client in a process of its own, for measuring its memory: uploads `size` deterministic bytes to `path` through
// sandbox.files.write (from an async generator), downloads them back through sandbox.files.iterate, hashes both
// ways, and prints one JSON line: the sha256 of each direction, the RSS after a warm-up round trip, and the peak
// RSS of the process (VmHWM), in bytes.
// Usage: node --import tsx test/support/files-transfer-child.ts <baseUrl> <path> <size>
import { createCipheriv, createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { connect } from "../../src/client/index.js";

const [baseUrl, path, sizeText] = process.argv.slice(2);
const size = Number(sizeText);
const key = Buffer.alloc(16, 7);
const block = 1024 * 1024;

/** `length` deterministic bytes (AES-128-CTR of zeros), one fresh 1 MiB buffer at a time. */
async function* bytes(length: number, hash: ReturnType<typeof createHash>): AsyncGenerator<Uint8Array> {
  const cipher = createCipheriv("aes-128-ctr", key, Buffer.alloc(16));
  const zeros = Buffer.alloc(block);
  for (let done = 0; done < length; done += block) {
    const piece = cipher.update(zeros.subarray(0, Math.min(block, length - done)));
    hash.update(piece);
    yield piece;
  }
}

const sandbox = await connect({ baseUrl });
// Warm up every code path once, so the baseline includes the client's code and its connection.
await sandbox.files.write(`${path}.warm`, bytes(4 * block, createHash("sha256")));
for await (const _ of sandbox.files.iterate(`${path}.warm`));
await sandbox.files.remove(`${path}.warm`);
globalThis.gc?.();
const baselineRss = process.memoryUsage().rss;

const uploaded = createHash("sha256");
const stat = await sandbox.files.write(path, bytes(size, uploaded));
const downloaded = createHash("sha256");
let received = 0;
for await (const chunk of sandbox.files.iterate(path)) {
  downloaded.update(chunk);
  received += chunk.length;
}
// This process's peak RSS (VmHWM), which starts anew at exec; getrusage's maxrss keeps the parent's (the test runner's).
const peakRss = Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))![1]) * 1024;
await sandbox.close();
process.stdout.write(
  `${JSON.stringify({ size: stat.size, received, uploadSha256: uploaded.digest("hex"), downloadSha256: downloaded.digest("hex"), baselineRss, peakRss })}\n`,
);
