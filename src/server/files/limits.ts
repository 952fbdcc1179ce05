import { sandboxError } from "../rpc/index.js";

/** Default transfers (reads and writes of file content) in progress on the whole daemon. */
export const defaultMaxTransfers = 64;
/** Default transfers in progress on one connection. */
export const defaultMaxTransfersPerConnection = 16;
/** Default watches open on one connection. */
export const defaultMaxWatchesPerConnection = 16;

/** Options for {@link FileLimits}. */
export interface FileLimitOptions {
  /** Transfers in progress on the daemon (Read, Write, REST GET of a file and PUT). Default {@link defaultMaxTransfers}. */
  maxTransfers?: number;
  /** Transfers in progress on one connection. Default {@link defaultMaxTransfersPerConnection}. */
  maxTransfersPerConnection?: number;
  /** Watches open on one connection. Default {@link defaultMaxWatchesPerConnection}. */
  maxWatchesPerConnection?: number;
}

/** What a slot is for. */
export type FileSlot = "transfer" | "watch";

/**
 * FileLimits counts the file service's long calls, per connection (an HTTP/2 session or an HTTP/1.1
 * socket) and in all, for the RPCs and the REST surface alike, and refuses one past a limit with
 * RESOURCE_EXHAUSTED (LIMIT_EXCEEDED) naming the daemon flag and its value.
 */
export class FileLimits {
  private readonly maxTransfers: number;
  private readonly maxTransfersPerConnection: number;
  private readonly maxWatchesPerConnection: number;
  private readonly perConnection = new WeakMap<object, { transfer: number; watch: number }>();
  private transfers = 0;

  /** Creates the counters; limits as in {@link FileLimitOptions}. */
  constructor(options: FileLimitOptions = {}) {
    this.maxTransfers = options.maxTransfers ?? defaultMaxTransfers;
    this.maxTransfersPerConnection = options.maxTransfersPerConnection ?? defaultMaxTransfersPerConnection;
    this.maxWatchesPerConnection = options.maxWatchesPerConnection ?? defaultMaxWatchesPerConnection;
  }

  /** Transfers in progress on the daemon. */
  get activeTransfers(): number {
    return this.transfers;
  }

  /**
   * Takes a slot for a call on `connection` (undefined: counted in all only) and returns its release,
   * which may be called more than once. Throws LIMIT_EXCEEDED when a limit is reached.
   */
  acquire(slot: FileSlot, connection: object | undefined): () => void {
    const counts =
      connection === undefined
        ? { transfer: 0, watch: 0 }
        : (this.perConnection.get(connection) ?? { transfer: 0, watch: 0 });
    if (slot === "transfer") {
      if (counts.transfer >= this.maxTransfersPerConnection) {
        throw refusal(
          `too many transfers on this connection: the limit of ${this.maxTransfersPerConnection} is reached`,
          "max-transfers-per-connection",
          this.maxTransfersPerConnection,
        );
      }
      if (this.transfers >= this.maxTransfers)
        throw refusal(
          `too many transfers: the limit of ${this.maxTransfers} is reached`,
          "max-transfers",
          this.maxTransfers,
        );
      this.transfers++;
    } else if (counts.watch >= this.maxWatchesPerConnection) {
      throw refusal(
        `too many watches on this connection: the limit of ${this.maxWatchesPerConnection} is reached`,
        "max-watches-per-connection",
        this.maxWatchesPerConnection,
      );
    }
    counts[slot]++;
    if (connection !== undefined) this.perConnection.set(connection, counts);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      counts[slot]--;
      if (slot === "transfer") this.transfers--;
    };
  }
}

function refusal(message: string, limit: string, value: number) {
  return sandboxError("LIMIT_EXCEEDED", message, { metadata: { limit, value: String(value) } });
}
