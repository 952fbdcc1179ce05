/**
 * The RPC layer's door: the services and their routes (sandbox.v1, health, reflection), the error
 * model every answer carries, and the interceptors (auth, call limits) with the call context they read.
 *
 * @module
 */
export {
  assertSafeBinding,
  assertSafeCors,
  assertSafeUserSwitch,
  type AuthOptions,
  createAuthInterceptor,
  createTokenCheck,
  isLoopbackHost,
  publicServices,
  resolveToken,
  type TokenSources,
} from "./auth.js";
export {
  callDetailsKey,
  clientGoneKey,
  connectionContextValues,
  connectionKey,
  type Peer,
  peerKey,
} from "./call-context.js";
export { interceptOutcome } from "./call-outcome.js";
export type { ProcessAudit } from "./process-audit.js";
export {
  errorDomain,
  errorInfoOf,
  type ErrorReasonName,
  grpcStatusDetails,
  sandboxError,
  shuttingDownError,
  throwIfShuttingDown,
  toConnectError,
  withConnectErrors,
  withErrorInfo,
} from "./errors.js";
export { createHealthService, createHealthStatus, type HealthStatus, ServingStatus } from "./health.js";
export {
  type CallCounter,
  type CallLimitOptions,
  createCallLimitInterceptor,
  createErrorMessageLimitInterceptor,
  defaultMaxCalls,
  defaultMaxCallsPerConnection,
  defaultMaxErrorMessageLength,
  defaultMaxMessageBytes,
} from "./limits.js";
export {
  answerReflectionRequest,
  createReflectionIndex,
  createReflectionService,
  createReflectionServiceV1alpha,
  type ReflectionIndex,
} from "./reflection.js";
export { callEndReason } from "./kill-origin.js";
export { createSandboxService, type SandboxServiceOptions } from "./sandbox-service.js";
