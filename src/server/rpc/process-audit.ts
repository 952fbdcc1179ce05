import type { ManagedProcess } from "../../process/index.js";
import type { Peer } from "./call-context.js";

/**
 * Writes the audit lines of processes: who started what, and how it ended. The services tell it of
 * every start; the daemon's observability (`createProcessAudit` in server/observe.ts) implements it.
 */
export interface ProcessAudit {
  /** A process was started (or failed to) on behalf of `peer`. */
  started(managed: ManagedProcess, peer: Peer | undefined, user: string): void;
}
