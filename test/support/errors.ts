import { Code, type ConnectError } from "@connectrpc/connect";
import { expect } from "vitest";
import { ErrorInfoSchema, type ErrorInfo } from "../../gen/google/rpc/error_details_pb.js";

/** The `google.rpc.ErrorInfo` details of an error, found as a client finds them (connect's `findDetails`). */
export function errorInfos(error: ConnectError): ErrorInfo[] {
  return error.findDetails(ErrorInfoSchema);
}

/** What a refusal must carry: its code, its ErrorInfo reason and (exactly) its metadata. */
export interface ExpectedRefusal {
  code: Code;
  reason: string;
  /** The ErrorInfo metadata, compared whole; `{}` when there is none. */
  metadata?: Record<string, string>;
  /** A part of the message, or a pattern it matches. */
  message?: string | RegExp;
}

/**
 * Checks that `error` has the code, and exactly one ErrorInfo of domain sandbox.v1 with the reason
 * and metadata; its message lowercase and never a bare internal error.
 */
export function expectReason(error: ConnectError, expected: ExpectedRefusal): void {
  const infos = errorInfos(error);
  expect({
    code: Code[error.code],
    infos: infos.map(({ reason, domain, metadata }) => ({ reason, domain, metadata: { ...metadata } })),
  }).toEqual({
    code: Code[expected.code],
    infos: [{ reason: expected.reason, domain: "sandbox.v1", metadata: expected.metadata ?? {} }],
  });
  if (expected.message !== undefined) expect(error.rawMessage).toMatch(expected.message);
  expect(error.rawMessage[0]).toBe(error.rawMessage[0].toLowerCase());
  expect(error.rawMessage).not.toMatch(/internal error|unexpected failure/);
}
