/**
 * The client core's door: the one command core every API is built on (a {@link ProcessHandle} started by
 * {@link launch}, its stream, source, output and input), its options, records and errors, and the transport.
 *
 * @module
 */
export { CommandFinished } from "./command-finished.js";
export {
  checkOptions,
  type CommandDefaults,
  commandOptionNames,
  type CommandOptions,
  DEFAULT_MAX_RETAINED_BYTES,
  optionNames,
  type PtySize,
  type ResourceLimits,
} from "./command-options.js";
export { chunkFromProto } from "./command-source.js";
export type { StreamState } from "./command-stream.js";
export {
  type DaemonAddress,
  type DaemonAddressOptions,
  defaultBaseUrl,
  isLoopbackHost,
  resolveDaemonAddress,
  tlsMismatch,
  tokenVariable,
  urlVariable,
} from "./daemon-address.js";
export {
  ExecutionTimeoutError,
  FileExistsError,
  FileNotFoundError,
  isUnreachable,
  LimitExceededError,
  OutputLostError,
  ProcessAlreadyExistsError,
  ProcessNotFoundError,
  ProcessExitedBeforeReadyError,
  ProcessNotRunningError,
  ProcessReadyTimeoutError,
  SandboxError,
  type SandboxErrorOptions,
  type SandboxErrorReason,
  StdinNotOpenError,
  toSandboxError,
} from "./errors.js";
export type { InputAck } from "./input-stream.js";
export { launch, type LaunchContext } from "./launch.js";
export type { OutputChunk, OutputGap, OutputOffsets, OutputStreamName } from "./output.js";
export { StreamDecoder } from "./stream-decoder.js";
export {
  type CommandContext,
  type CommandLog,
  type KillOptions,
  ProcessHandle,
  type ProcessLogs,
  readProcessLogs,
  type WaitOptions,
} from "./process-handle.js";
export {
  commandLine,
  exitCodeOf,
  type ProcessDetails,
  type ProcessExit,
  type ResourceUsage,
} from "./process-record.js";
export type {
  ListeningPort,
  ListPortsOptions,
  PortReady,
  WaitForExitOptions,
  WaitForLogOptions,
  WaitForLogResult,
  WaitForPortOptions,
} from "./readiness.js";
/** The readiness calls (waits and the port listing) over the generated client, as handles and the sandbox use them. */
export * as readiness from "./readiness.js";
export {
  backoffDelay,
  classifyFailure,
  defaultReconnectSettings,
  type FailureKind,
  type ReconnectSettings,
} from "./reconnect-policy.js";
export {
  createSandboxConnection,
  defaultPingIntervalMs,
  defaultPingTimeoutMs,
  type SandboxConnection,
  type SandboxConnectionOptions,
  type SandboxProtocol,
} from "./transport.js";
