/**
 * The sandboxd client: an ergonomic layer over the generated, fully typed stubs, which are
 * re-exported for the raw RPCs (`createClient(SandboxService, transport)`). One command core (a
 * {@link ProcessHandle} started by one launch path, waiting through Exec or in the background
 * through StartProcess and StreamLogs) carries every API the {@link Sandbox} offers in the shapes
 * of the SDKs it mirrors: the Cloudflare Sandbox SDK (exec, execStream, process calls), the Together
 * sandbox SDK (exec with arguments, getOutput), the LangSmith sandbox SDK (run, CommandHandle),
 * Vercel Sandbox (runCommand, Command, CommandFinished) and the Orbiter sandbox's lifecycle. It
 * never loads server code or a native module.
 *
 * @module
 */
export { connect, Sandbox } from "./sandbox.js";
export type { CloseOptions, SandboxDescription, SandboxOptions } from "./sandbox.js";
export { ProcessHandle } from "./core/index.js";
export type { CommandContext, CommandLog, KillOptions, ProcessLogs, WaitOptions } from "./core/index.js";
export { CommandHandle } from "./wrappers/index.js";
export { CommandFinished } from "./core/index.js";
export { DEFAULT_MAX_RETAINED_BYTES } from "./core/index.js";
export type { CommandOptions, PtySize } from "./core/index.js";
export type { StreamState } from "./core/index.js";
export type {
  BaseExecOptions,
  ExecEvent,
  ExecOptions,
  ExecOutput,
  ExecResult,
  StreamOptions,
} from "./wrappers/index.js";
export type { ListProcessesOptions, ProcessOptions } from "./wrappers/index.js";
export type { RunOptions } from "./wrappers/index.js";
export type { Command, RunCommandOptions, RunCommandParams } from "./wrappers/index.js";
export { isExecResult, isProcess, isProcessStatus } from "./wrappers/index.js";
export type { LogEvent, Process } from "./wrappers/index.js";
export { processStatuses, type ProcessStatus } from "../shared/process-status.js";
export { exitCauses, type ExitCause, type KillOrigin, type StartStage } from "../shared/exit-cause.js";
export type { ProcessDetails, ProcessExit, ResourceLimits, ResourceUsage } from "./core/index.js";
export { canTransition, sandboxTransitions } from "./lifecycle.js";
export type { SandboxStatus } from "./lifecycle.js";
export {
  ExecutionTimeoutError,
  FileExistsError,
  FileNotFoundError,
  LimitExceededError,
  OutputLostError,
  ProcessAlreadyExistsError,
  ProcessNotFoundError,
  ProcessExitedBeforeReadyError,
  ProcessNotRunningError,
  ProcessReadyTimeoutError,
  SandboxError,
  StdinNotOpenError,
  toSandboxError,
} from "./core/index.js";
export type {
  ListeningPort,
  ListPortsOptions,
  PortReady,
  WaitForExitOptions,
  WaitForLogOptions,
  WaitForLogResult,
  WaitForPortOptions,
} from "./core/index.js";
export type { SandboxErrorOptions, SandboxErrorReason } from "./core/index.js";
export { backoffDelay, classifyFailure, defaultReconnectSettings } from "./core/index.js";
export type { FailureKind, ReconnectSettings } from "./core/index.js";
export { StreamDecoder } from "./core/index.js";
export type { OutputChunk, OutputGap, OutputOffsets, OutputStreamName } from "./core/index.js";
export type { InputAck } from "./core/index.js";
export { defaultBaseUrl, isLoopbackHost, resolveDaemonAddress, tokenVariable, urlVariable } from "./core/index.js";
export type { DaemonAddress, DaemonAddressOptions } from "./core/index.js";
export { createSandboxConnection, defaultPingIntervalMs, defaultPingTimeoutMs } from "./core/index.js";
export type { SandboxConnection, SandboxConnectionOptions, SandboxProtocol } from "./core/index.js";
export { FileChangedError, FileWatch, permissionsText, ReadLimitError, SandboxFiles } from "./files/index.js";
export type {
  DownloadOptions,
  FileChangeEvent,
  FileChangeKind,
  FileInfo,
  FileKind,
  FileWatchEvent,
  ListOptions,
  MkdirOptions,
  ReadOptions,
  ReadProgress,
  ReadRangeOptions,
  RemoveOptions,
  RenameOptions,
  SignalOptions,
  StatOptions,
  UploadOptions,
  WatchEndKind,
  WatchOptions,
  WatchOverflowEvent,
  WatchOverflowKind,
  WriteData,
  WriteOptions,
} from "./files/index.js";
/** The generated service descriptor and messages, for raw RPCs with `createClient`. */
export * as sandboxV1 from "../../gen/sandbox/v1/sandbox_pb.js";
export { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
/** The generated file service descriptor and messages, for raw file RPCs with `createClient(FileService, transport)`. */
export * as filesV1 from "../../gen/sandbox/v1/files_pb.js";
export { FileService } from "../../gen/sandbox/v1/files_pb.js";
export { createClient, type Client } from "@connectrpc/connect";
