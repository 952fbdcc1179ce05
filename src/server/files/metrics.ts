import { Counter, type Registry } from "prom-client";

/** The file service's metrics, on the daemon's registry. */
export interface FileMetrics {
  /** File content bytes moved, by direction (`read`: to clients, `write`: from them). */
  readonly bytes: Counter<"direction">;
  /** File operations answered, by operation, surface (`rpc`, `rest`) and result (`ok` or a status code name). */
  readonly operations: Counter<"operation" | "surface" | "result">;
}

/** Creates (or, on a registry that has them, finds) the file service's metrics. */
export function createFileMetrics(registry: Registry): FileMetrics {
  const existing = registry.getSingleMetric("sandboxd_file_bytes_total") as Counter<"direction"> | undefined;
  const bytes =
    existing ??
    new Counter({
      name: "sandboxd_file_bytes_total",
      help: "File content bytes moved by the file service, by direction (read: to clients, write: from them).",
      labelNames: ["direction"],
      registers: [registry],
    });
  const operations =
    (registry.getSingleMetric("sandboxd_file_operations_total") as
      | Counter<"operation" | "surface" | "result">
      | undefined) ??
    new Counter({
      name: "sandboxd_file_operations_total",
      help: "File operations answered, by operation, surface (rpc, rest) and result.",
      labelNames: ["operation", "surface", "result"],
      registers: [registry],
    });
  return { bytes, operations };
}
