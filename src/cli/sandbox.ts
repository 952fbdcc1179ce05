#!/usr/bin/env node
/**
 * `sandbox`: the command-line client of sandboxd (exec, start, ps, logs, kill, attach, cp, ls), built on
 * the client SDK. See `sandbox --help` and the README's "From a terminal".
 *
 * @module
 */
import { flushed } from "./sandbox/local-output.js";
import { runSandbox } from "./sandbox/program.js";

const code = await runSandbox(process.argv.slice(2));
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
// Exit now rather than when the loop empties: a paused terminal or a closing connection must not hold the exit.
process.exit(code);
