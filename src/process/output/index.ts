/**
 * Output's door: the bounded buffer of a process's stdout and stderr and its readers, and the
 * daemon's budget for all buffered output and input.
 *
 * @module
 */
export {
  OutputBuffer,
  type OutputChunk,
  type OutputGap,
  type OutputItem,
  OutputReader,
  type OutputStreamName,
  type StreamOffsets,
  type SharedByteBudget,
} from "./output-buffer.js";
export { defaultMemoryBudgetBytes, MemoryBudget, type MemoryBudgetOptions } from "./memory-budget.js";
