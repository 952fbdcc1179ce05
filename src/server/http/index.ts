/**
 * The HTTP layer's door: the listener (one port, HTTP/1.1 and HTTP/2, TLS), the gate in front of the
 * RPC routes (Host check, public-call limits, early answers), the plain-HTTP endpoints (probes,
 * metrics, CORS), session keepalive and the uniform error answers of every protocol.
 *
 * @module
 */
export { withErrorAnswers } from "./error-answers.js";
export { sendEarly, type AnyRequest, type AnyResponse } from "./early-answer.js";
export { createGate, type Gate, type GateOptions } from "./gate.js";
export { createHttpEndpoints, type HttpEndpoints } from "./http-endpoints.js";
export {
  defaultKeepaliveIntervalMs,
  defaultKeepaliveTimeoutMs,
  type KeepaliveOptions,
  watchSessionLiveness,
} from "./keepalive.js";
export {
  createTrustedPeers,
  isLocalAddress,
  socketOfConnection,
  trustedRequestProblem,
  type TrustedPeers,
  type TrustedPeersOptions,
} from "./trusted-peers.js";
export {
  createListener,
  defaultPrefaceTimeoutMs,
  type Listener,
  type ListenerOptions,
  type RequestHandler,
  type TlsOptions,
} from "./listener.js";
