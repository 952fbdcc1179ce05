/**
 * The sandboxd client: an ergonomic layer (Sandbox, exec, execStream, background processes,
 * CommandHandle, runCommand) over the generated, fully typed stubs, which are re-exported for the raw
 * RPCs (`createClient(SandboxService, transport)`). It never loads server code or node-pty.
 *
 * @module
 */
export { connect, Sandbox } from "./sandbox.js";
export type {
  CloseOptions,
  Command,
  ListProcessesOptions,
  RunCommandOptions,
  RunCommandParams,
  RunOptions,
  SandboxDescription,
  SandboxOptions,
} from "./sandbox.js";
export { CommandHandle, classifyFailure, DEFAULT_MAX_RETAINED_BYTES } from "./command-handle.js";
export type { CommandCallbacks, CommandContext, CommandHandleOptions, CommandLog, FailureKind, KillOptions, WaitOptions } from "./command-handle.js";
export { CommandFinished } from "./command-finished.js";
export type { BaseExecOptions, CommandOptions, PtySize } from "./command-spec.js";
export type { ExecEvent, ExecOptions, ExecResult, StreamOptions } from "./exec.js";
export { isExecResult, isProcess, isProcessStatus } from "./process-views.js";
export type { LogEvent, Process, ProcessOptions } from "./process-views.js";
export { processStatuses } from "./process-record.js";
export type { ProcessDetails, ProcessExit, ProcessStatus } from "./process-record.js";
export { canTransition, sandboxTransitions } from "./lifecycle.js";
export type { SandboxStatus } from "./lifecycle.js";
export { ExecutionTimeoutError, OutputLostError, ProcessAlreadyExistsError, ProcessNotFoundError, SandboxError, toSandboxError } from "./errors.js";
export { StreamDecoder } from "./output.js";
export type { OutputChunk, OutputOffsets, OutputStreamName } from "./output.js";
export type { InputAck } from "./input-stream.js";
export { createSandboxConnection } from "./transport.js";
export type { SandboxConnection, SandboxConnectionOptions, SandboxProtocol } from "./transport.js";
/** The generated service descriptor and messages, for raw RPCs with `createClient`. */
export * as sandboxV1 from "../../gen/sandbox/v1/sandbox_pb.js";
export { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
export { createClient, type Client } from "@connectrpc/connect";
