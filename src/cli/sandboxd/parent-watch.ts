import { constants } from "node:os";
import { loadNativeAddon } from "../../process/native/index.js";
import { processRunning } from "../../shared/process-exists.js";

/**
 * Whether npm started this daemon as the command itself: `npm start` in this package (npm execs the
 * daemon) or `npx sandboxd` / `npm exec sandboxd` (npm runs it through a shell). A daemon that some
 * other package's npm script starts (and perhaps detaches on purpose) is not: `npm_*` variables are
 * inherited by everything below npm, so the command and the package are checked too.
 */
export function startedByNpm(environment: NodeJS.ProcessEnv = process.env): boolean {
  if (environment.npm_command === "exec") return true;
  return environment.npm_lifecycle_event === "start" && environment.npm_package_name === "sandboxd";
}

/**
 * Makes the daemon shut down (as on SIGTERM) when the process that started it exits, where npm
 * started it (see {@link startedByNpm}). npm passes SIGTERM and SIGINT on to the shell it runs a
 * command with, and that shell (dash) exits without passing them to the daemon it started: without
 * this, signalling npm's pid, as a supervisor does, would leave the daemon and every command running,
 * adopted by init. Uses PR_SET_PDEATHSIG through the addon (at once), else looks at the parent pid
 * every second. A parent already gone at start (pid 1: adopted) counts as gone. A daemon that is
 * itself PID 1 (of a container or pid namespace, `npx sandboxd` as its command) has no parent to
 * watch: its parent pid reads 0, and its own exit ends the namespace.
 */
export function exitWithNpmParent(environment: NodeJS.ProcessEnv = process.env): void {
  if (!startedByNpm(environment)) return;
  const gone = () => process.kill(process.pid, "SIGTERM");
  const parent = process.ppid;
  if (process.pid === 1 || parent === 0) return;
  if (parent === 1 || !processRunning(parent)) {
    gone();
    return;
  }
  const addon = loadNativeAddon();
  if (addon !== null) {
    // The parent may have exited between the check above and the prctl: then no signal will come.
    if (addon.dieWithParent(constants.signals.SIGTERM) !== parent) gone();
    return;
  }
  const timer = setInterval(() => {
    if (process.ppid !== parent) {
      clearInterval(timer);
      gone();
    }
  }, 1000);
  timer.unref();
}
