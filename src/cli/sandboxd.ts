#!/usr/bin/env node
/**
 * The `sandboxd` command: makes sure the process runs with the daemon's Node flags (node-flags.ts,
 * relaunch.ts), then loads and starts the daemon (daemon.ts). The daemon is imported only after the check, so a
 * process that restarts itself with the flags has loaded next to nothing first.
 */
import { fileURLToPath } from "node:url";
import { relaunchWithNodeFlags } from "./sandboxd/relaunch.js";

relaunchWithNodeFlags(fileURLToPath(import.meta.url));
import("./sandboxd/daemon.js")
  .then(({ runDaemon }) => runDaemon())
  .catch((error: unknown) => {
    process.stderr.write(`sandboxd: ${(error as Error).message}\n`);
    process.exit(1);
  });
