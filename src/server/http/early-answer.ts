import type http from "node:http";
import http2 from "node:http2";
import type { ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, errorToJson } from "@connectrpc/connect/protocol-connect";
import { grpcStatusDetails, withErrorInfo } from "../rpc/index.js";

/** A request of either HTTP version, as the listener hands it over. */
export type AnyRequest = http.IncomingMessage | http2.Http2ServerRequest;
/** A response of either HTTP version. */
export type AnyResponse = http.ServerResponse | http2.Http2ServerResponse;

/**
 * Percent-encodes a `grpc-message` as the gRPC spec asks: every byte of the UTF-8 encoding outside
 * printable ASCII (0x20-0x7E), and `%` itself. Spaces, colons and slashes stay as they are.
 */
export function encodeGrpcMessage(message: string): string {
  let encoded = "";
  for (const byte of Buffer.from(message, "utf8")) {
    encoded +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return encoded;
}

/**
 * A refusal encoded once for every protocol, so answering it many times (a flood of calls without
 * the token) costs no error object, no protobuf encoding and no JSON per call. Made by
 * {@link prepareRefusal}; answered by {@link answerEarly}.
 */
export interface PreparedRefusal {
  /** The HTTP status of a Connect unary (or unknown-protocol) answer. */
  readonly status: number;
  /** gRPC and gRPC-Web: the trailers-only headers, without content-type. */
  readonly grpcHeaders: Readonly<Record<string, string>>;
  /** A Connect stream's end-of-stream message, enveloped. */
  readonly connectEndStream: Buffer;
  /** A Connect unary (or unknown-protocol) JSON error body. */
  readonly json: Buffer;
}

/** Encodes `refusal` for every protocol (see {@link PreparedRefusal}); a `google.rpc.ErrorInfo` by its code is added when it has none. */
export function prepareRefusal(refusal: ConnectError): PreparedRefusal {
  const error = withErrorInfo(refusal);
  const endStream = Buffer.from(JSON.stringify({ error: errorToJson(error, undefined) }));
  const prefix = Buffer.alloc(5);
  prefix[0] = 0b10;
  prefix.writeUInt32BE(endStream.length, 1);
  return {
    status: codeToHttpStatus(error.code),
    grpcHeaders: {
      "grpc-status": String(error.code),
      "grpc-message": encodeGrpcMessage(error.rawMessage),
      "grpc-status-details-bin": grpcStatusDetails(error),
    },
    connectEndStream: Buffer.concat([prefix, endStream]),
    json: Buffer.from(JSON.stringify(errorToJson(error, undefined))),
  };
}

/**
 * Answers a call with an error before its request body is read, in the protocol its content type
 * names: gRPC and gRPC-Web get a trailers-only response (with `grpc-status-details-bin`), a Connect
 * stream its end-of-stream message, a Connect unary call (or anything else) the JSON error with the
 * code's HTTP status; each carries the error's details, a `google.rpc.ErrorInfo` among them (one by
 * its code is added when it has none). The request body is never read: an HTTP/2 stream is reset
 * once the answer is out, an HTTP/1.1 connection closed. A refusal answered often is best prepared
 * once ({@link prepareRefusal}).
 */
export function answerEarly(request: AnyRequest, response: AnyResponse, refusal: ConnectError | PreparedRefusal): void {
  const prepared = "grpcHeaders" in refusal ? refusal : prepareRefusal(refusal);
  const contentType = String(request.headers["content-type"] ?? "");
  const headers: Record<string, string> = {};
  let status = 200;
  let body: Buffer;
  if (contentType.startsWith("application/grpc")) {
    // gRPC and gRPC-Web alike: the status travels in the headers of a trailers-only answer.
    headers["content-type"] = contentType.startsWith("application/grpc-web") ? contentType : "application/grpc+proto";
    Object.assign(headers, prepared.grpcHeaders);
    body = Buffer.alloc(0);
  } else if (contentType.startsWith("application/connect+")) {
    headers["content-type"] = contentType;
    body = prepared.connectEndStream;
  } else {
    status = prepared.status;
    headers["content-type"] = "application/json";
    body = prepared.json;
  }
  sendEarly(request, response, status, headers, body);
}

/**
 * Sends a whole answer to a request whose body was not read, and lets go of what the body would have
 * used: an HTTP/2 stream is closed once the answer is out (a body-less answer as one HEADERS frame),
 * an HTTP/1.1 connection closed (it cannot carry another request). For answers of other shapes than
 * {@link answerEarly}'s, such as the KEP-539.2 REST surface's JSON errors.
 */
export function sendEarly(
  request: AnyRequest,
  response: AnyResponse,
  status: number,
  headers: Record<string, string>,
  body: Buffer,
): void {
  const stream = "stream" in request ? request.stream : undefined;
  if (stream !== undefined && body.length === 0) {
    // A gRPC trailers-only answer is one HEADERS frame that ends the stream. Written through the
    // compatibility response it would be HEADERS, then an empty DATA frame with END_STREAM, which
    // grpc-core clients (Python, C++, Go's too in places) report as UNKNOWN "Stream removed"
    // instead of the status in the headers.
    if (!stream.destroyed && !stream.headersSent) {
      stream.respond({ ":status": status, ...headers, "content-length": "0" }, { endStream: true });
      stream.once("finish", () => {
        if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
      });
    }
    return;
  }
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
