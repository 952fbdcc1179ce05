/**
 * Spawning's door: one {@link SpawnedChild} interface behind the pipe and PTY spawners, and the
 * launcher that plans a command's cgroups, user and helper.
 *
 * @module
 */
export type { SpawnedChild } from "./child.js";
export {
  defaultMaxTasksPerCommand,
  defaultMaxTasksTotal,
  type ForkLimit,
  Launcher,
  type LauncherOptions,
  LaunchError,
  type LaunchPlan,
} from "./launcher.js";
export { HelperStartError, spawnPipeChild } from "./pipe-child.js";
export { spawnPtyChild } from "./pty-child.js";
export { orphansReapedSoFar, reapOrphans, type OrphanReaping } from "./native-exits.js";
