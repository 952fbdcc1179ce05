/**
 * A program a command runs (`node -e`) to look for the daemon's token everywhere its user can read in /proc, and
 * to try to signal every process above it: the daemon that started it, the daemon's parent (a container's init,
 * npm...), and so on up to PID 1. Used by test/image-token.test.ts and the image's smoke test.
 */

/** What {@link tokenProbeArgs} prints, as one JSON line. */
export interface TokenProbeReport {
  /** The probe's own uid. */
  uid: number;
  /** Processes looked at (the probe itself left out). */
  processes: number;
  /** How many of them let the probe read each file. */
  readable: { environ: number; cmdline: number; mem: number };
  /** Where the token was found, as `<pid>/<file>`. */
  found: string[];
  /** The processes above the probe, nearest first: the answer of kill(2) to each (`EPERM`: refused). */
  ancestors: Array<{ pid: number; name: string; uid: number; signal: string }>;
}

// Plain JavaScript (CommonJS, no imports of ours): it runs in whatever Node the command finds, inside the image too.
const source = String.raw`
const fs = require("fs");
const needle = Buffer.from(process.argv[1], "hex");
const field = (status, name) => (new RegExp("^" + name + ":\\s+(\\S+)", "m").exec(status) || [])[1];
const report = { uid: process.getuid(), processes: 0, readable: { environ: 0, cmdline: 0, mem: 0 }, found: [], ancestors: [] };
const chunk = Buffer.alloc(1 << 20);
function searchMemory(pid) {
  let maps, fd;
  try {
    maps = fs.readFileSync("/proc/" + pid + "/maps", "utf8");
    fd = fs.openSync("/proc/" + pid + "/mem", "r");
  } catch {
    return;
  }
  report.readable.mem++;
  try {
    for (const line of maps.split("\n")) {
      const range = /^([0-9a-f]+)-([0-9a-f]+) r/.exec(line);
      if (range === null || line.endsWith("[vvar]") || line.endsWith("[vsyscall]")) continue;
      const end = parseInt(range[2], 16);
      // Chunks overlap by the needle's length, so a token across two of them is found too.
      for (let at = parseInt(range[1], 16); at < end; at += chunk.length - needle.length) {
        let bytes;
        try {
          bytes = fs.readSync(fd, chunk, 0, Math.min(chunk.length, end - at), at);
        } catch {
          break;
        }
        if (chunk.subarray(0, bytes).includes(needle)) {
          report.found.push(pid + "/mem");
          return;
        }
        if (at + bytes >= end) break;
      }
    }
  } finally {
    fs.closeSync(fd);
  }
}
for (const entry of fs.readdirSync("/proc")) {
  if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
  report.processes++;
  for (const file of ["environ", "cmdline"]) {
    try {
      const data = fs.readFileSync("/proc/" + entry + "/" + file);
      report.readable[file]++;
      if (data.includes(needle)) report.found.push(entry + "/" + file);
    } catch {}
  }
  searchMemory(entry);
}
let pid = Number(field(fs.readFileSync("/proc/self/status", "utf8"), "PPid"));
while (pid > 0) {
  let status;
  try {
    status = fs.readFileSync("/proc/" + pid + "/status", "utf8");
  } catch {
    break;
  }
  // Signal 0 asks the kernel whether any signal would be allowed, and sends none; when it is refused,
  // a real SIGKILL is tried too (and must be refused as well).
  let signal = "allowed";
  try {
    process.kill(pid, 0);
  } catch (error) {
    signal = error.code;
  }
  if (signal === "EPERM") {
    try {
      process.kill(pid, "SIGKILL");
      signal = "killed";
    } catch (error) {
      signal = error.code;
    }
  }
  report.ancestors.push({ pid, name: field(status, "Name"), uid: Number(field(status, "Uid")), signal });
  pid = Number(field(status, "PPid"));
}
process.stdout.write(JSON.stringify(report) + "\n");
`;

/**
 * The arguments of `node` that run the probe for `token`. The token travels hex-encoded, so the probe's own
 * command line (which the daemon's records and the process list keep) does not contain it.
 */
export function tokenProbeArgs(token: string): string[] {
  return ["-e", source, Buffer.from(token).toString("hex")];
}
