export { createRoutes, servedServices, type RoutesOptions } from "./routes.js";
export { defaultKillGracePeriodMs } from "../process/index.js";
export { createSandboxService, type SandboxServiceOptions } from "./sandbox-service.js";
export { defaultHost, defaultPort, startServer, type SandboxServer, type SandboxServerOptions } from "./server.js";
export { errorDomain, errorInfoOf, sandboxError, toConnectError, type ErrorReasonName } from "./errors.js";
export { assertSafeBinding, assertSafeCors, assertSafeUserSwitch, createAuthInterceptor, isLoopbackHost, publicServices, resolveToken, type AuthOptions, type TokenSources } from "./auth.js";
export { defaultKeepaliveIntervalMs, defaultKeepaliveTimeoutMs, watchSessionLiveness, type KeepaliveOptions } from "./keepalive.js";
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
} from "./limits.js";
export { createHealthService, createHealthStatus, ServingStatus, type HealthStatus } from "./health.js";
export { answerReflectionRequest, createReflectionIndex, createReflectionService, createReflectionServiceV1alpha, type ReflectionIndex } from "./reflection.js";
export { createListener, defaultPrefaceTimeoutMs, type Listener, type ListenerOptions, type RequestHandler, type TlsOptions } from "./listener.js";
