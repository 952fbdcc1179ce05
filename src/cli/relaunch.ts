import { isSea } from "node:sea";
import { loadNativeAddon } from "../process/native.js";
import { missingNodeFlags } from "./node-flags.js";

/**
 * Makes sure this process runs with the daemon's Node flags (node-flags.ts): when it was started
 * without them (the `sandboxd` bin's `#!/usr/bin/env node` cannot pass flags portably), it replaces
 * itself with the same node, script and arguments plus the flags (execve: same pid, environment, stdin, stdout and
 * stderr, so supervisors, signals and `npm start` see no difference). Returns when nothing is to be done, or
 * when it cannot: without the native addon, or in the one-file build, whose SEA configuration
 * carries the flags itself (Node 24.6 and later apply them). Call it before loading anything else.
 */
export function relaunchWithNodeFlags(): void {
  if (isSea()) return;
  const missing = missingNodeFlags(process.execArgv, process.env.NODE_OPTIONS);
  if (missing.length === 0) return;
  const native = loadNativeAddon();
  if (native === null) return;
  try {
    native.execProgram(process.execPath, [process.execPath, ...process.execArgv, ...missing, ...process.argv.slice(1)]);
  } catch (error) {
    // The daemon still runs, only with V8's default heap limits.
    process.stderr.write(`sandboxd: warning: could not restart with ${missing.join(" ")}: ${(error as Error).message}\n`);
  }
}
