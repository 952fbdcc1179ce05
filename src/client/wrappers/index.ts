/**
 * The mirrored APIs' door: thin wrappers over the core, each in the shape of the SDK it mirrors
 * (Cloudflare's exec, execStream and process calls; LangSmith's run and CommandHandle; Vercel's
 * runCommand). They depend on the core; the core knows none of them.
 *
 * @module
 */
export { CommandHandle } from "./command-handle.js";
export {
  type BaseExecOptions,
  exec,
  type ExecEvent,
  type ExecOptions,
  type ExecOutput,
  type ExecResult,
  execStream,
  type StreamOptions,
} from "./exec.js";
export { isExecResult, isProcess, isProcessStatus, type LogEvent, type Process } from "./process-views.js";
export type { ListProcessesOptions, ProcessesContext, ProcessOptions } from "./processes.js";
export { type Command, runCommand, type RunCommandOptions, type RunCommandParams } from "./run-command.js";
export { run, type RunOptions } from "./run.js";
export * as processes from "./processes.js";
