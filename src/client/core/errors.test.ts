import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { isUnreachable, toSandboxError } from "./errors.js";

/** The error Node gives a client stream the server refused unprocessed, as connect-node wraps it. */
function refusedByNode(): ConnectError {
  const cause = Object.assign(new Error("Stream closed with error code NGHTTP2_REFUSED_STREAM"), {
    code: "ERR_HTTP2_STREAM_ERROR",
  });
  const error = ConnectError.from(cause, Code.Internal);
  error.cause = cause;
  return error;
}

describe("isUnreachable", () => {
  it("calls a stream refused unprocessed (REFUSED_STREAM, however connect-node words it) unreachable", () => {
    expect(isUnreachable(refusedByNode())).toBe(true);
    expect(
      isUnreachable(new ConnectError("http/2 stream closed with error code REFUSED_STREAM (0x7)", Code.Unavailable)),
    ).toBe(true);
    expect(toSandboxError(refusedByNode()).code).toBe("UNAVAILABLE");
  });

  it("leaves other stream failures their own code", () => {
    const cause = new Error("Stream closed with error code NGHTTP2_INTERNAL_ERROR");
    const error = ConnectError.from(cause, Code.Internal);
    expect(isUnreachable(error)).toBe(false);
    expect(toSandboxError(error).code).toBe("INTERNAL");
    expect(toSandboxError(new ConnectError("refused streams were counted", Code.Internal)).code).toBe("INTERNAL");
  });
});
