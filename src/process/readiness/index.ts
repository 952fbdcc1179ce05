/**
 * Readiness: waiting until a process's port answers, a line of its output matches, or it exits,
 * and the TCP ports listening in the sandbox with the processes that hold them. No RPC here.
 *
 * @module
 */
export {
  compileLogPattern,
  LineScanner,
  type LogMatch,
  type LogPattern,
  maxLineBytes,
  maxPatternLength,
} from "./log-pattern.js";
export {
  listListeningPorts,
  readListeningSockets,
  type ListeningPort,
  type ListeningSocket,
} from "./listening-ports.js";
export { addressText, type HttpCheck, probePort, type ProbeResult } from "./port-probe.js";
export {
  defaultPortIntervalMs,
  lastOutputLines,
  type LogWait,
  maxWaitTimeoutMs,
  type PortReady,
  type PortWait,
  waitForExit,
  waitForLog,
  waitForPort,
  type WaitBounds,
} from "./waits.js";
