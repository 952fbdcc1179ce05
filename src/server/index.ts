export { createRoutes, servedServices, type RoutesOptions } from "./routes.js";
export { defaultKillGracePeriodMs } from "../process/index.js";
export { createSandboxService, type SandboxServiceOptions } from "./rpc/index.js";
export {
  agentSandboxDefaultPorts,
  defaultHost,
  defaultPort,
  startServer,
  type AgentSandboxOptions,
  type SandboxServer,
  type SandboxServerOptions,
} from "./server.js";
export { errorDomain, errorInfoOf, sandboxError, toConnectError, type ErrorReasonName } from "./rpc/index.js";
export {
  assertSafeBinding,
  assertSafeCors,
  assertSafeUserSwitch,
  createAuthInterceptor,
  isLoopbackHost,
  publicServices,
  resolveToken,
  type AuthOptions,
  type TokenSources,
} from "./rpc/index.js";
export {
  defaultKeepaliveIntervalMs,
  defaultKeepaliveTimeoutMs,
  watchSessionLiveness,
  type KeepaliveOptions,
} from "./http/index.js";
export {
  connectionContextValues,
  connectionKey,
  createCallLimitInterceptor,
  createErrorMessageLimitInterceptor,
  defaultMaxCalls,
  defaultMaxErrorMessageLength,
  defaultMaxCallsPerConnection,
  defaultMaxMessageBytes,
  type CallCounter,
  type CallLimitOptions,
} from "./rpc/index.js";
export { createHealthService, createHealthStatus, ServingStatus, type HealthStatus } from "./rpc/index.js";
export {
  answerReflectionRequest,
  createReflectionIndex,
  createReflectionService,
  createReflectionServiceV1alpha,
  type ReflectionIndex,
} from "./rpc/index.js";
export {
  createListener,
  defaultPrefaceTimeoutMs,
  type Listener,
  type ListenerOptions,
  type RequestHandler,
  type TlsOptions,
} from "./http/index.js";
export { createLogger, logLevels, type LoggerOptions, type LogLevel } from "./observe.js";
