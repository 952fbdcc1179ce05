import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus, HealthCheckResponseSchema } from "../../gen/grpc/health/v1/health_pb.js";
import { createCallSignal, throwIfShuttingDown } from "./call-signal.js";

/** The serving states of the gRPC health protocol (`grpc.health.v1.HealthCheckResponse.ServingStatus`). */
export { ServingStatus };

/**
 * The serving status of each health-checked service, by fully qualified name; `""` stands for the
 * server as a whole, as the gRPC health protocol says. Watchers are told of every change.
 */
export interface HealthStatus {
  /** The status of `service`, or undefined when it is not health-checked. */
  get(service: string): ServingStatus | undefined;
  /** Sets the status of `service`, adding it when new, and wakes its watchers. */
  set(service: string, status: ServingStatus): void;
  /** Sets every known service, the server included, to NOT_SERVING: the server is going away. */
  shutdown(): void;
  /** Known services and their status. */
  entries(): [string, ServingStatus][];
  /**
   * Resolves at the next change of any status, or when `signal` aborts (then at once if already
   * aborted). Never rejects.
   */
  changed(signal: AbortSignal): Promise<void>;
}

/** Creates a {@link HealthStatus} with the server (`""`) and each of `services` SERVING. */
export function createHealthStatus(services: readonly string[]): HealthStatus {
  const statuses = new Map<string, ServingStatus>([["", ServingStatus.SERVING], ...services.map((name) => [name, ServingStatus.SERVING] as const)]);
  const waiting = new Set<() => void>();
  const notify = () => {
    for (const wake of [...waiting]) wake();
  };
  return {
    get: (service) => statuses.get(service),
    set(service, status) {
      if (statuses.get(service) === status) return;
      statuses.set(service, status);
      notify();
    },
    shutdown() {
      for (const service of statuses.keys()) statuses.set(service, ServingStatus.NOT_SERVING);
      notify();
    },
    entries: () => [...statuses],
    changed(signal) {
      if (signal.aborted) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const done = () => {
          waiting.delete(done);
          signal.removeEventListener("abort", done);
          resolve();
        };
        waiting.add(done);
        signal.addEventListener("abort", done, { once: true });
      });
    },
  };
}

/** Options for {@link createHealthService}. */
export interface HealthServiceOptions {
  /** Aborted when the server shuts down: Watch streams then send NOT_SERVING and end with UNAVAILABLE. */
  shutdownSignal?: AbortSignal;
}

/**
 * Creates `grpc.health.v1.Health` over `status`. Check answers the current status, NOT_FOUND for a
 * service that is not health-checked. Watch sends the current status at once (SERVICE_UNKNOWN for
 * an unknown service, as the protocol asks, rather than an error) and then each change, until the
 * client goes or the server shuts down. List answers every known service.
 */
export function createHealthService(status: HealthStatus, options: HealthServiceOptions = {}): ServiceImpl<typeof Health> {
  const shutdownSignal = options.shutdownSignal;
  return {
    check(request) {
      const current = status.get(request.service);
      if (current === undefined) throw new ConnectError(`unknown service: ${request.service}`, Code.NotFound);
      return { status: current };
    },
    async *watch(request, context) {
      const call = createCallSignal(context.signal, shutdownSignal);
      let last: ServingStatus | undefined;
      try {
        for (;;) {
          const current = status.get(request.service) ?? ServingStatus.SERVICE_UNKNOWN;
          if (current !== last) {
            last = current;
            yield create(HealthCheckResponseSchema, { status: current });
          }
          if (context.signal.aborted) return;
          // The last status sent on shutdown is NOT_SERVING; then the stream ends as every stream does.
          throwIfShuttingDown(shutdownSignal);
          await status.changed(call.signal);
        }
      } finally {
        call.dispose();
      }
    },
    list() {
      return { statuses: Object.fromEntries(status.entries().map(([name, current]) => [name, { status: current }])) };
    },
  };
}
