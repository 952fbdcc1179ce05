/**
 * The cgroups' door: the per-command pids cgroups, the commands' shared resource cgroup, and fast
 * cgroup moves.
 *
 * @module
 */
export { favorCgroupMoves } from "./cgroup-moves.js";
export { PidsCgroup } from "./pids-cgroup.js";
export {
  availableMemoryBytes,
  defaultCommandsMemoryBytes,
  ResourceCgroup,
  type ResourceLimits,
} from "./resource-cgroup.js";
