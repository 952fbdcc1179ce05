import type { ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";

/**
 * connect-es reports a request it cannot parse as protobuf (truncated, invalid UTF-8 in a string)
 * as INTERNAL with a message starting "parse binary: ", where a malformed request is the caller's
 * fault: INVALID_ARGUMENT, as connect-es itself says for malformed JSON. The parse happens before any
 * interceptor, so this rewrites the status of those answers, and only those, in every protocol:
 * the gRPC trailer, the gRPC-Web trailer frame, the Connect end-of-stream message and the Connect
 * unary error (HTTP 500 becomes 400).
 */
export function withParseErrorsAsInvalidArgument(routes: (router: ConnectRouter) => void): (router: ConnectRouter) => void {
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

const marker = "parse binary: ";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function rewrite(response: UniversalServerResponse): UniversalServerResponse {
  const body = response.body;
  if (body === undefined) return response;
  const contentType = response.header?.get("content-type") ?? "";
  const connectUnary = !contentType.startsWith("application/grpc") && !contentType.startsWith("application/connect+");
  const result: UniversalServerResponse = { ...response };
  result.body = (async function* () {
    let first = true;
    for await (const chunk of body) {
      if (connectUnary && first && response.status === 500) {
        const fixed = rewriteConnectJson(chunk, false);
        // The adapter reads the status after the first chunk: set before it is yielded.
        if (fixed !== undefined) {
          result.status = 400;
          if (response.header?.has("content-length")) response.header.set("content-length", String(fixed.length));
        }
        yield fixed ?? chunk;
      } else {
        yield rewriteFrame(chunk);
      }
      first = false;
    }
    // gRPC: the status is in the trailer, written once the body is done.
    const trailer = response.trailer;
    if (trailer?.get("grpc-status") === "13" && decodeURIComponent(trailer.get("grpc-message") ?? "").startsWith(marker)) {
      trailer.set("grpc-status", "3");
    }
  })();
  return result;
}

/** Rewrites a gRPC-Web trailer frame (flag 0x80) or a Connect end-of-stream message (flag 0x02) whose error is a parse failure. */
function rewriteFrame(chunk: Uint8Array): Uint8Array {
  if (chunk.length < 5 || (chunk[0] !== 0x80 && chunk[0] !== 0x02)) return chunk;
  const length = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength).getUint32(1);
  if (length !== chunk.length - 5) return chunk;
  const payload = chunk.subarray(5);
  let replaced: Uint8Array | undefined;
  if (chunk[0] === 0x80) {
    const text = decoder.decode(payload);
    if (/grpc-status: ?13\r\n/i.test(text) && decodeURIComponent(/grpc-message: ?([^\r]*)/i.exec(text)?.[1] ?? "").startsWith(marker)) {
      replaced = encoder.encode(text.replace(/grpc-status: ?13\r\n/i, "grpc-status: 3\r\n"));
    }
  } else {
    replaced = rewriteConnectJson(payload, true);
  }
  if (replaced === undefined) return chunk;
  const frame = new Uint8Array(5 + replaced.length);
  frame[0] = chunk[0];
  new DataView(frame.buffer).setUint32(1, replaced.length);
  frame.set(replaced, 5);
  return frame;
}

/** The Connect error JSON (unary, or `{error}` of an end-of-stream message) with internal parse failures made invalid_argument. */
function rewriteConnectJson(bytes: Uint8Array, wrapped: boolean): Uint8Array | undefined {
  try {
    const json = JSON.parse(decoder.decode(bytes)) as { code?: string; message?: string; error?: { code?: string; message?: string } };
    const error = wrapped ? json.error : json;
    if (error?.code !== "internal" || !error.message?.startsWith(marker)) return undefined;
    error.code = "invalid_argument";
    return encoder.encode(JSON.stringify(json));
  } catch {
    return undefined;
  }
}
