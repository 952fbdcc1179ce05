import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type Health,
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthCheckResponseSchema,
} from "../../../gen/grpc/health/v1/health_pb.js";
import { raceSignal } from "../../shared/abort.js";
import { sandboxError, throwIfShuttingDown } from "./errors.js";

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
  const statuses = new Map<string, ServingStatus>([
    ["", ServingStatus.SERVING],
    ...services.map((name) => [name, ServingStatus.SERVING] as const),
  ]);
  // One promise per change, settled and replaced by notify: every waiter wakes.
  let wake!: () => void;
  let next = new Promise<void>((resolve) => (wake = resolve));
  const notify = () => {
    wake();
    next = new Promise<void>((resolve) => (wake = resolve));
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
      return raceSignal(next, signal).catch(() => {});
    },
  };
}

/**
 * Creates `grpc.health.v1.Health` over `status`. Check answers the current status, NOT_FOUND
 * (SERVICE_NOT_FOUND) for a service that is not health-checked. Watch sends the current status at
 * once (SERVICE_UNKNOWN for an unknown service, as the protocol asks, rather than an error) and then
 * each change, until the client goes or the server shuts down: the router's `shutdownSignal` ends it
 * with UNAVAILABLE, after the NOT_SERVING that `status.shutdown()` sends first.
 */
export function createHealthService(status: HealthStatus): ServiceImpl<typeof Health> {
  return {
    check(request) {
      const current = status.get(request.service);
      if (current === undefined) {
        throw sandboxError("SERVICE_NOT_FOUND", `unknown service: ${request.service}`, {
          metadata: { service: request.service },
        });
      }
      return { status: current };
    },
    async *watch(request, context) {
      let last: ServingStatus | undefined;
      for (;;) {
        const current = status.get(request.service) ?? ServingStatus.SERVICE_UNKNOWN;
        if (current !== last) {
          last = current;
          yield create(HealthCheckResponseSchema, { status: current });
        }
        // The last status sent on shutdown is NOT_SERVING; then the stream ends as every stream does.
        throwIfShuttingDown(context.signal);
        if (context.signal.aborted) return;
        await status.changed(context.signal);
      }
    },
    list() {
      return { statuses: Object.fromEntries(status.entries().map(([name, current]) => [name, { status: current }])) };
    },
  };
}
