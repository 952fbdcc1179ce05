import { availableParallelism } from "node:os";
import { type CommandLimitCaps, commandLimitsProblem, type CommandLimitsRequest } from "../../shared/limits.js";
import type { CommandLimits } from "../cgroups/index.js";
import { ProcessError } from "../errors.js";
import type { Launcher } from "../spawn/index.js";

/**
 * The daemon's rules for one command's own limits (`ProcessSpec.limits`): defaults for a command
 * that asks for none, and caps on what one may ask for. Tasks are capped by the launcher's
 * `maxTasksPerCommand`, which is also their default.
 */
export interface CommandLimitPolicy {
  /** Memory limit of a command that asks for none, in bytes; undefined or 0 for none of its own (the commands' total still applies). */
  defaultMemoryBytes?: number;
  /** Most memory one command may ask for, in bytes. Default: the commands' total (the launcher's), else no cap. */
  maxMemoryBytes?: number;
  /** Most CPU one command may ask for, in thousandths of one CPU. Default: every CPU of the machine. */
  maxCpuMillis?: number;
}

/**
 * CommandLimitResolver turns the limits a command asks for into the limits it runs under: the
 * daemon's default applied, every value checked against its bounds and the daemon's caps, and each
 * against what this machine's cgroups can hold (never ignored in silence).
 */
export class CommandLimitResolver {
  /** The caps a request is held to, as the start line and refusals name them. */
  readonly caps: CommandLimitCaps;
  private readonly defaultMemoryBytes?: number;

  constructor(
    private readonly launcher: Launcher,
    policy: CommandLimitPolicy = {},
  ) {
    const maxTasks = launcher.maxTasksPerCommand;
    this.caps = {
      memoryBytes: policy.maxMemoryBytes || launcher.resources?.applied.memoryBytes,
      cpuMillis: policy.maxCpuMillis || availableParallelism() * 1000,
      maxTasks: maxTasks > 0 ? maxTasks : undefined,
    };
    const defaultMemory = policy.defaultMemoryBytes || undefined;
    if (defaultMemory !== undefined && launcher.resources?.capabilities.memoryLimit)
      this.defaultMemoryBytes = Math.min(defaultMemory, this.caps.memoryBytes ?? defaultMemory);
  }

  /**
   * A command's own limits with the daemon's defaults applied, or a ProcessError: INVALID_ARGUMENT
   * for a value out of bounds, LIMIT_ABOVE_CAP above a cap (naming it), LIMIT_NOT_ENFORCEABLE for a
   * limit this machine's cgroups cannot hold.
   */
  resolve(requested: CommandLimitsRequest): CommandLimits {
    const problem = commandLimitsProblem(requested, this.caps);
    if (problem !== undefined) {
      if (problem.cap === undefined)
        throw new ProcessError(problem.message, "INVALID_ARGUMENT", { metadata: { field: problem.field } });
      throw new ProcessError(problem.message, "LIMIT_ABOVE_CAP", {
        metadata: {
          field: problem.field,
          cap: problem.cap.name,
          max: String(problem.cap.max),
          value: String(problem.cap.value),
        },
      });
    }
    const capabilities = this.launcher.resources?.capabilities;
    const unenforceable = (field: string, controller: string) =>
      new ProcessError(
        `${field} cannot be enforced here: the daemon has no writable ${controller} cgroup for commands`,
        "LIMIT_NOT_ENFORCEABLE",
        { metadata: { field, controller } },
      );
    if (requested.memoryBytes !== undefined && !capabilities?.memoryLimit)
      throw unenforceable("limits.memory_bytes", "memory");
    if (requested.cpuMillis !== undefined && !capabilities?.cpuLimit) throw unenforceable("limits.cpu_millis", "cpu");
    if (requested.cpuWeight !== undefined && !capabilities?.cpuLimit) throw unenforceable("limits.cpu_weight", "cpu");
    if (requested.maxTasks !== undefined && this.launcher.forkLimit() === "none")
      throw unenforceable("limits.max_tasks", "pids");
    const limits: CommandLimits = {};
    const memoryBytes = requested.memoryBytes ?? this.defaultMemoryBytes;
    if (memoryBytes !== undefined) limits.memoryBytes = memoryBytes;
    if (requested.cpuMillis !== undefined) limits.cpuMillis = requested.cpuMillis;
    if (requested.cpuWeight !== undefined) limits.cpuWeight = requested.cpuWeight;
    if (requested.maxTasks !== undefined) limits.maxTasks = requested.maxTasks;
    return limits;
  }
}
