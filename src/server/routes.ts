import type { ConnectRouter } from "@connectrpc/connect";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { ProcessService } from "../../gen/process/v1/process_pb.js";
import { FileService } from "../../gen/sandbox/v1/files_pb.js";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { createProcessService } from "./agent-sandbox/index.js";
import { createFileService, type FileServiceOptions } from "./files/index.js";
import {
  createHealthService,
  createHealthStatus,
  createReflectionIndex,
  createReflectionService,
  createReflectionServiceV1alpha,
  createSandboxService,
  type HealthStatus,
  type SandboxServiceOptions,
} from "./rpc/index.js";

/** Options for {@link createRoutes}. */
export interface RoutesOptions extends SandboxServiceOptions {
  /**
   * Serving status reported by `grpc.health.v1.Health`. Default: a fresh one with the server and
   * `sandbox.v1.SandboxService` SERVING.
   */
  health?: HealthStatus;
  /** The file service's dependencies; without them sandbox.v1.FileService is not served. */
  files?: FileServiceOptions;
}

/** The services {@link createRoutes} serves, as server reflection lists them. */
export const servedServices = [
  SandboxService,
  FileService,
  ProcessService,
  Health,
  ServerReflection,
  ServerReflectionV1alpha,
] as const;

/**
 * Creates the routes function: the seam between the RPC layer and the listener, as in
 * connect-es's `connectNodeAdapter({ routes })`. It serves `sandbox.v1.SandboxService`,
 * `sandbox.v1.FileService` (given `files`), KEP-539.2's
 * `process.v1.ProcessService` on the same process manager, gRPC health and gRPC server reflection (v1
 * and v1alpha).
 */
export function createRoutes(options: RoutesOptions): (router: ConnectRouter) => void {
  const health =
    options.health ??
    createHealthStatus([
      SandboxService.typeName,
      ProcessService.typeName,
      ...(options.files ? [FileService.typeName] : []),
    ]);
  // Every failure carries a google.rpc.ErrorInfo: reflection lets grpcurl and buf curl print it.
  const reflection = createReflectionIndex(servedServices, [file_google_rpc_error_details]);
  return (router) => {
    router.service(SandboxService, createSandboxService(options));
    if (options.files !== undefined) router.service(FileService, createFileService(options.files));
    router.service(ProcessService, createProcessService(options));
    router.service(Health, createHealthService(health));
    router.service(ServerReflection, createReflectionService(reflection));
    router.service(ServerReflectionV1alpha, createReflectionServiceV1alpha(reflection));
  };
}
