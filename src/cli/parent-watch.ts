import { constants } from "node:os";
import { loadNativeAddon } from "../process/native.js";

/**
 * Makes the daemon shut down (as on SIGTERM) when the process that started it exits, where that
 * process is one of npm's (`npm start`, `npx sandboxd`, `npm exec`: npm sets `npm_command`). npm
 * passes SIGTERM and SIGINT on to the shell it runs a command with, and that shell (dash) exits
 * without passing them to the daemon it started: without this, signalling npm's pid, as a
 * supervisor does, would leave the daemon and every command running, adopted by init. Uses
 * PR_SET_PDEATHSIG through the addon (at once), else looks at the parent pid every second.
 * A daemon started otherwise (a service manager, a shell's `&`, the image's init) is left alone.
 */
export function exitWithNpmParent(environment: NodeJS.ProcessEnv = process.env): void {
  if (environment.npm_command === undefined) return;
  const parent = process.ppid;
  const gone = () => process.kill(process.pid, "SIGTERM");
  const addon = loadNativeAddon();
  if (addon !== null) {
    // The parent may have exited between our start and the prctl: then no signal will come.
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
