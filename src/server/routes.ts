import type { ConnectRouter } from "@connectrpc/connect";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { createSandboxService, type SandboxServiceOptions } from "./sandbox-service.js";

/** Options for {@link createRoutes}. */
export type RoutesOptions = SandboxServiceOptions;

/**
 * Creates the routes function: the seam between the RPC layer and the listener, as in
 * connect-es's `connectNodeAdapter({ routes })`.
 */
export function createRoutes(options: RoutesOptions): (router: ConnectRouter) => void {
  return (router) => {
    router.service(SandboxService, createSandboxService(options));
  };
}
