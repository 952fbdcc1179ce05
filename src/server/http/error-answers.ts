import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { codeFromString, codeToHttpStatus, errorToJson } from "@connectrpc/connect/protocol-connect";
import { encodeGrpcMessage } from "./early-answer.js";
import { grpcStatusDetails, sandboxError, withErrorInfo } from "../rpc/index.js";

/**
 * Wraps every handler of the routes so that each error answer, whoever made it, reads the same in
 * every protocol (the gRPC trailer, the gRPC-Web trailer frame, the Connect end-of-stream message
 * and the Connect unary error):
 *
 * - It carries a `google.rpc.ErrorInfo`. The service's own errors have theirs; an answer connect-es
 *   makes itself, before any interceptor (a request it cannot parse, a compression it does not
 *   support, a bad timeout header, a message over the size limit), gets the reason of its code.
 * - A request that cannot be parsed as protobuf (truncated, invalid UTF-8 in a string) is
 *   INVALID_ARGUMENT, as connect-es itself says for malformed JSON, where connect-es says INTERNAL
 *   with a message starting "parse binary: ".
 * - A `grpc-message` is percent-encoded as the gRPC spec asks (only bytes outside printable ASCII,
 *   and `%`), where connect-es uses `encodeURIComponent`: grpc-js decodes it with `decodeURI`, and
 *   its users read `process not found%3A x` otherwise.
 *
 * A successful answer passes through unchanged; only the last frame of a stream is looked at.
 */
export function withErrorAnswers(routes: (router: ConnectRouter) => void): (router: ConnectRouter) => void {
  return (router) => {
    routes(router);
    const handlers = router.handlers as UniversalHandler[];
    for (let index = 0; index < handlers.length; index++) {
      const original = handlers[index];
      const wrapped = async (request: Parameters<UniversalHandler>[0]) => rewrite(await original(request));
      handlers[index] = Object.assign(wrapped, original) as UniversalHandler;
    }
  };
}

const parseFailure = "parse binary: ";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function rewrite(response: UniversalServerResponse): UniversalServerResponse {
  const body = response.body;
  if (body === undefined) return response;
  const contentType = response.header?.get("content-type") ?? "";
  const grpc = contentType.startsWith("application/grpc") && !contentType.startsWith("application/grpc-web");
  const connectUnary = !contentType.startsWith("application/grpc") && !contentType.startsWith("application/connect+");
  const result: UniversalServerResponse = { ...response };
  result.body = (async function* () {
    let first = true;
    for await (const chunk of body) {
      if (connectUnary && first && response.status >= 400) {
        const fixed = rewriteConnectJson(chunk, false);
        // The adapter reads the status after the first chunk: set before it is yielded.
        if (fixed !== undefined) {
          result.status = fixed.status;
          if (response.header?.has("content-length")) response.header.set("content-length", String(fixed.bytes.length));
        }
        yield fixed?.bytes ?? chunk;
      } else if (!grpc) {
        yield rewriteFrame(chunk);
      } else {
        yield chunk;
      }
      first = false;
    }
    // gRPC: the status is in the trailer, written once the body is done.
    if (grpc && response.trailer !== undefined) rewriteGrpcStatus(response.trailer);
  })();
  return result;
}

/** The error a gRPC status names, with INTERNAL parse failures made INVALID_ARGUMENT and an ErrorInfo. */
function normalize(code: Code, message: string): ConnectError {
  const parse = code === Code.Internal && message.startsWith(parseFailure);
  const error = new ConnectError(message, parse ? Code.InvalidArgument : code);
  // connect-es's refusal of a request over `readMaxBytes`, which --max-message-bytes sets.
  const tooLarge = code === Code.ResourceExhausted ? /larger than configured readMaxBytes (\d+)/.exec(message) : null;
  if (tooLarge !== null)
    return sandboxError("LIMIT_EXCEEDED", message, { metadata: { limit: "max-message-bytes", value: tooLarge[1] } });
  return withErrorInfo(error);
}

/**
 * Rewrites a gRPC status held in headers (a trailer, or a gRPC-Web trailer frame read as headers):
 * the message re-encoded, and for an answer without details the code normalized and a
 * `grpc-status-details-bin` added.
 */
function rewriteGrpcStatus(headers: Headers): void {
  const status = headers.get("grpc-status");
  if (status === null || status === "0") return;
  const message = safeDecode(headers.get("grpc-message") ?? "");
  headers.set("grpc-message", encodeGrpcMessage(message));
  if (headers.has("grpc-status-details-bin")) return;
  const error = normalize(Number(status) as Code, message);
  headers.set("grpc-status", String(error.code));
  headers.set("grpc-status-details-bin", grpcStatusDetails(error));
}

/** Rewrites a gRPC-Web trailer frame (flag 0x80) or a Connect end-of-stream message (flag 0x02) that ends with an error. */
function rewriteFrame(chunk: Uint8Array): Uint8Array {
  if (chunk.length < 5 || (chunk[0] !== 0x80 && chunk[0] !== 0x02)) return chunk;
  const length = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength).getUint32(1);
  if (length !== chunk.length - 5) return chunk;
  const payload = chunk.subarray(5);
  let replaced: Uint8Array | undefined;
  if (chunk[0] === 0x80) {
    const headers = new Headers();
    for (const line of decoder.decode(payload).split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon > 0) headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
    }
    if (headers.get("grpc-status") === "0" || headers.get("grpc-status") === null) return chunk;
    rewriteGrpcStatus(headers);
    let text = "";
    headers.forEach((value, name) => (text += `${name}: ${value}\r\n`));
    replaced = encoder.encode(text);
  } else {
    replaced = rewriteConnectJson(payload, true)?.bytes;
  }
  if (replaced === undefined) return chunk;
  const frame = new Uint8Array(5 + replaced.length);
  frame[0] = chunk[0];
  new DataView(frame.buffer).setUint32(1, replaced.length);
  frame.set(replaced, 5);
  return frame;
}

/**
 * The Connect error JSON (unary, or the `error` of an end-of-stream message) with the code
 * normalized and an ErrorInfo added, when it has no details; undefined when it is left as it is.
 */
function rewriteConnectJson(bytes: Uint8Array, wrapped: boolean): { bytes: Uint8Array; status: number } | undefined {
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(decoder.decode(bytes)) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const found = (wrapped ? json.error : json) as { code?: string; message?: string; details?: unknown[] } | undefined;
  if (found?.code === undefined || (found.details?.length ?? 0) > 0) return undefined;
  const code = codeFromString(found.code);
  if (code === undefined) return undefined;
  const error = normalize(code, found.message ?? "");
  const answer = errorToJson(error, undefined);
  return {
    bytes: encoder.encode(JSON.stringify(wrapped ? { ...json, error: answer } : answer)),
    status: codeToHttpStatus(error.code),
  };
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
