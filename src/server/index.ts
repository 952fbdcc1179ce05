export { createRoutes, servedServices, type RoutesOptions } from "./rpc/routes.js";
export { defaultKillGracePeriodMs } from "../process/index.js";
export { createSandboxService, type SandboxServiceOptions } from "./rpc/sandbox-service.js";
export { defaultHost, defaultPort, startServer, type SandboxServer, type SandboxServerOptions } from "./server.js";
export { errorDomain, errorInfoOf, sandboxError, toConnectError, type ErrorReasonName } from "./rpc/errors.js";
export { assertSafeBinding, assertSafeCors, assertSafeUserSwitch, createAuthInterceptor, isLoopbackHost, publicServices, resolveToken, type AuthOptions, type TokenSources } from "./rpc/auth.js";
export { defaultKeepaliveIntervalMs, defaultKeepaliveTimeoutMs, watchSessionLiveness, type KeepaliveOptions } from "./http/keepalive.js";
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
} from "./rpc/limits.js";
export { createHealthService, createHealthStatus, ServingStatus, type HealthStatus } from "./rpc/health.js";
export { answerReflectionRequest, createReflectionIndex, createReflectionService, createReflectionServiceV1alpha, type ReflectionIndex } from "./rpc/reflection.js";
export { createListener, defaultPrefaceTimeoutMs, type Listener, type ListenerOptions, type RequestHandler, type TlsOptions } from "./http/listener.js";
