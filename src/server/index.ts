export { createRoutes, type RoutesOptions } from "./routes.js";
export { createSandboxService, defaultKillGracePeriodMs, type SandboxServiceOptions } from "./sandbox-service.js";
export { defaultHost, defaultPort, startServer, type SandboxServer, type SandboxServerOptions } from "./server.js";
export { toConnectError } from "./errors.js";
export { assertSafeBinding, createAuthInterceptor, isLoopbackHost, publicServices, resolveToken, type AuthOptions, type TokenSources } from "./auth.js";
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
