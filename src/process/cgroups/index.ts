/**
 * The cgroups' door: the per-command pids cgroups, the commands' parent and own resource cgroups, and fast
 * cgroup moves.
 *
 * @module
 */
export { favorCgroupMoves } from "./cgroup-moves.js";
export { PidsCgroup } from "./pids-cgroup.js";
export { CgroupSetupError, CommandCgroup, type CommandLimits, type TreeKill } from "./command-cgroup.js";
export type { ResourceUsage } from "./resource-usage.js";
export {
  availableMemoryBytes,
  type CgroupCapabilities,
  defaultCommandsMemoryBytes,
  ResourceCgroup,
  type ResourceLimits,
} from "./resource-cgroup.js";
