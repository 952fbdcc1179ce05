export { createRoutes, type RoutesOptions } from "./routes.js";
export { createSandboxService, defaultKillGracePeriodMs, type SandboxServiceOptions } from "./sandbox-service.js";
export { defaultHost, defaultPort, startServer, type SandboxServer, type SandboxServerOptions } from "./server.js";
export { toConnectError } from "./errors.js";
