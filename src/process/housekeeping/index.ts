/**
 * Housekeeping's door: what the daemon does beside running commands (the ledger that reaps groups a
 * killed daemon left, lingering records' expiry, giving memory back after work).
 *
 * @module
 */
export { ExpiryQueue } from "./expiry-queue.js";
export {
  GroupLedger,
  type GroupRecordDetails,
  type GroupReservation,
  type LostProcess,
  processStartTime,
  type ReapReport,
} from "./group-ledger.js";
export {
  memoryReclaims,
  noteBytesMoved,
  noteProcessStarted,
  reclaimMemoryAsDaemon,
  releaseBufferedMemory,
} from "./memory-reclaim.js";
