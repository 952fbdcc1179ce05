export { createBaseEnvironment, defaultPath, identityEnvironment } from "./start/index.js";
export { ProcessError, type ProcessErrorReason } from "./errors.js";
export { memoryReclaims, noteBytesMoved, reclaimMemoryAsDaemon, releaseBufferedMemory } from "./housekeeping/index.js";
export {
  classifyExit,
  type ClassifiedExit,
  type ExitCause,
  type ExitFacts,
  type KillOrigin,
  type KillReason,
  type StartFailure,
  type StartStage,
} from "./exit-cause.js";
export {
  defaultKillGracePeriodMs,
  type ExitProbe,
  ManagedProcess,
  type ProcessDescription,
  type ProcessExit,
  type ProcessStatus,
} from "./managed-process.js";
export {
  OutputBuffer,
  OutputReader,
  type OutputChunk,
  type OutputGap,
  type OutputItem,
  type OutputStreamName,
  type StreamOffsets,
} from "./output/index.js";
export { defaultMemoryBudgetBytes, MemoryBudget, type MemoryBudgetOptions } from "./output/index.js";
export {
  createProcessManager,
  defaultLingerMs,
  defaultMaxProcesses,
  defaultOutputCapacityBytes,
  ProcessManager,
  type ProcessFilter,
  type ProcessManagerOptions,
  type StartOptions,
} from "./process-manager.js";
export { CommandLimitResolver, type CommandLimitPolicy } from "./start/index.js";
export { parseSignal, signalName, type SignalName } from "./signals.js";
export { Workspace, workspaceProblemFor } from "./workspace.js";
export type { ProcessSpec } from "./start/index.js";
export {
  defaultOutputHeadBytes,
  resolveRetention,
  type OutputRetention,
  type RetentionLimits,
  type RetentionRequest,
} from "./retention.js";
export { GroupLedger, type LostProcess, processStartTime, type ReapReport } from "./housekeeping/index.js";
export {
  defaultMaxTasksPerCommand,
  defaultMaxTasksTotal,
  Launcher,
  type ForkLimit,
  type LaunchPlan,
  type LauncherOptions,
} from "./spawn/index.js";
export { PidsCgroup } from "./cgroups/index.js";
export { groupsOf, resolveUser, rootIdentity, type UserIdentity } from "./user.js";
export * from "../shared/limits.js";
export {
  type CgroupCapabilities,
  type CommandLimits,
  defaultCommandsMemoryBytes,
  ResourceCgroup,
  type ResourceLimits,
  type ResourceUsage,
} from "./cgroups/index.js";
export { loadNativeAddon, type NativeAddon } from "./native/index.js";
export { orphansReapedSoFar, reapOrphans, type OrphanReaping } from "./spawn/index.js";
export {
  defaultPortIntervalMs,
  listListeningPorts,
  type ListeningPort,
  type LogMatch,
  maxWaitTimeoutMs,
  waitForExit,
  waitForLog,
  waitForPort,
} from "./readiness/index.js";
