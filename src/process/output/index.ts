/**
 * Output's door: the bounded buffer of a process's stdout and stderr and its readers.
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
} from "./output-buffer.js";
