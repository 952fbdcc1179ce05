import type http from "node:http";
import http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";

/** A request of either HTTP version, as the listener hands it over. */
export type AnyRequest = http.IncomingMessage | http2.Http2ServerRequest;
/** A response of either HTTP version. */
export type AnyResponse = http.ServerResponse | http2.Http2ServerResponse;

/** The HTTP status of a Connect unary error, by code (connect protocol's table). */
const connectHttpStatus: Partial<Record<Code, number>> = {
  [Code.Canceled]: 499,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.FailedPrecondition]: 400,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Unavailable]: 503,
  [Code.Unauthenticated]: 401,
};

/** The snake_case name of a code, as the Connect protocol spells it ("resource_exhausted"). */
export function connectCodeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

/**
 * Percent-encodes a `grpc-message` as the gRPC spec asks: every byte of the UTF-8 encoding outside
 * printable ASCII (0x20-0x7E), and `%` itself. Spaces, colons and slashes stay as they are.
 */
export function encodeGrpcMessage(message: string): string {
  let encoded = "";
  for (const byte of Buffer.from(message, "utf8")) {
    encoded += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return encoded;
}

/**
 * Answers a call with an error before its request body is read, in the protocol its content type
 * names: gRPC and gRPC-Web get a trailers-only response, a Connect stream its end-of-stream message,
 * a Connect unary call (or anything else) the JSON error with the code's HTTP status. The request
 * body is never read: an HTTP/2 stream is reset once the answer is out, an HTTP/1.1 connection
 * closed.
 */
export function answerEarly(request: AnyRequest, response: AnyResponse, error: ConnectError): void {
  const contentType = String(request.headers["content-type"] ?? "");
  const headers: Record<string, string> = {};
  let status = 200;
  let body: Buffer;
  if (contentType.startsWith("application/grpc")) {
    // gRPC and gRPC-Web alike: the status travels in the headers of a trailers-only answer.
    headers["content-type"] = contentType.startsWith("application/grpc-web") ? contentType : "application/grpc+proto";
    headers["grpc-status"] = String(error.code);
    headers["grpc-message"] = encodeGrpcMessage(error.rawMessage);
    body = Buffer.alloc(0);
  } else if (contentType.startsWith("application/connect+")) {
    const endStream = Buffer.from(JSON.stringify({ error: { code: connectCodeName(error.code), message: error.rawMessage } }));
    const prefix = Buffer.alloc(5);
    prefix[0] = 0b10;
    prefix.writeUInt32BE(endStream.length, 1);
    headers["content-type"] = contentType;
    body = Buffer.concat([prefix, endStream]);
  } else {
    status = connectHttpStatus[error.code] ?? 500;
    headers["content-type"] = "application/json";
    body = Buffer.from(JSON.stringify({ code: connectCodeName(error.code), message: error.rawMessage }));
  }
  const stream = "stream" in request ? request.stream : undefined;
  if (stream === undefined) {
    // The body was not read, so the connection cannot carry another request.
    headers.connection = "close";
    response.once("finish", () => request.socket.destroySoon());
  } else {
    response.once("finish", () => {
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    });
  }
  headers["content-length"] = String(body.length);
  (response as http.ServerResponse).writeHead(status, headers);
  (response as http.ServerResponse).end(body);
}
