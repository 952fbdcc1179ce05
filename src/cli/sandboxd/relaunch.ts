import cluster from "node:cluster";
import { realpathSync } from "node:fs";
import inspector from "node:inspector";
import { isSea } from "node:sea";
import { loadNativeAddon } from "../../process/native/index.js";
import { missingNodeFlags } from "./node-flags.js";

/** Node flags after which `process.argv[1]` is not a script to run again. */
const notAScript = ["-e", "--eval", "-p", "--print", "-i", "--interactive", "-c", "--check", "--test"];

/**
 * Makes sure this process runs with the daemon's Node flags (node-flags.ts): when it was started
 * without them (the `sandboxd` bin's `#!/usr/bin/env node` cannot pass flags portably), it replaces
 * itself with the same node, script and arguments plus the flags (execv: same pid, environment,
 * stdin, stdout and stderr, so supervisors, signals and `npm start` see no difference). `script` is
 * the file that calls it: only a process whose main script that is restarts, so nothing a wrapper
 * did runs twice.
 *
 * Returns, and the daemon runs with V8's defaults, where a restart would lose something or cannot
 * be done: SANDBOXD_NO_RELAUNCH=1; the flags (or an operator's own values) already given; the
 * one-file build (its SEA configuration carries the flags; Node 24.6 and later apply them); a
 * process with an IPC channel (a `fork()`ed child, PM2), a cluster worker, or an inspector attached
 * (all lost at an exec); a main script that is another file, code from `-e`, or stdin; no native
 * addon. Call it before loading anything else.
 */
export function relaunchWithNodeFlags(script: string): void {
  if (process.env.SANDBOXD_NO_RELAUNCH === "1" || isSea()) return;
  const missing = missingNodeFlags(process.execArgv, process.env.NODE_OPTIONS);
  if (missing.length === 0) return;
  if (process.channel !== undefined || cluster.isWorker || inspector.url() !== undefined) return;
  if (process.execArgv.some((flag) => notAScript.includes(flag.split("=")[0]!)) || !isMainScript(script)) return;
  const native = loadNativeAddon();
  if (native === null) return;
  try {
    native.execProgram(process.execPath, [process.execPath, ...process.execArgv, ...missing, ...process.argv.slice(1)]);
  } catch (error) {
    process.stderr.write(
      `sandboxd: warning: could not restart with ${missing.join(" ")}: ${(error as Error).message}\n`,
    );
  }
}

/** Whether `process.argv[1]` names `script` (symlinks resolved: the bin is a link to it). */
function isMainScript(script: string): boolean {
  const main = process.argv[1];
  if (main === undefined) return false;
  try {
    return realpathSync(main) === realpathSync(script);
  } catch {
    return false;
  }
}
