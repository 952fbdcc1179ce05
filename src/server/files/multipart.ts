import { FileError } from "../../files/index.js";

/** Most bytes of a part's headers (and of what comes before the first boundary) taken. */
const maxHeaderBytes = 16 * 1024;

/**
 * The boundary of a `multipart/form-data` content type, or undefined for any other content type.
 * Throws INVALID_ARGUMENT (field `content-type`) for a multipart type without a boundary.
 */
export function multipartBoundary(contentType: string): string | undefined {
  if (!/^multipart\/form-data\s*(;|$)/i.test(contentType)) return undefined;
  const match = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  const boundary = match?.[1] ?? match?.[2];
  if (boundary === undefined || boundary.length > 200) {
    throw new FileError("multipart/form-data needs a boundary of at most 200 characters", "INVALID_ARGUMENT", {
      metadata: { field: "content-type" },
    });
  }
  return boundary;
}

/**
 * The bytes of the part named `file` of a `multipart/form-data` body, streamed as they arrive: a
 * part's bytes are never gathered whole, only the few bytes that might start a boundary are held
 * back. Other parts are skipped. Throws INVALID_ARGUMENT (field `file`) when the body has no such
 * part or is cut before its closing boundary, so a cut upload is never taken for a whole one.
 */
export async function* multipartFile(body: AsyncIterable<Buffer>, boundary: string): AsyncGenerator<Buffer> {
  const invalid = (why: string) =>
    new FileError(`invalid multipart body: ${why}`, "INVALID_ARGUMENT", { metadata: { field: "file" } });
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  // The first boundary may open the body without the CRLF before it.
  let pending: Buffer = Buffer.from("\r\n");
  let state: "preamble" | "headers" | "data" | "done" = "preamble";
  let inFile = false;
  let found = false;
  for await (const chunk of body) {
    if (state === "done") continue;
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    for (;;) {
      if (state === "preamble" || state === "data") {
        const at = pending.indexOf(delimiter);
        if (at < 0) {
          // Everything but a possible start of the delimiter can go.
          const keep = Math.min(pending.length, delimiter.length - 1);
          if (state === "data" && inFile && pending.length > keep) yield pending.subarray(0, pending.length - keep);
          if (state === "preamble" && pending.length > maxHeaderBytes)
            throw invalid("no boundary where one was expected");
          pending = pending.subarray(pending.length - keep);
          break;
        }
        if (state === "data" && inFile && at > 0) yield pending.subarray(0, at);
        if (inFile) found = true;
        inFile = false;
        const after = pending.subarray(at + delimiter.length);
        if (after.length < 2) {
          pending = pending.subarray(at);
          break;
        }
        if (after.subarray(0, 2).toString("latin1") === "--") {
          state = "done";
          break;
        }
        pending = after;
        state = "headers";
      }
      if (state === "headers") {
        const end = pending.indexOf("\r\n\r\n");
        if (end < 0) {
          if (pending.length > maxHeaderBytes) throw invalid("a part's headers are too long");
          break;
        }
        const headers = pending.subarray(0, end).toString("utf8");
        inFile = /^content-disposition:[^\r\n]*;\s*name="?file"?(\s*;|\s*$|\r)/im.test(headers) && !found;
        pending = pending.subarray(end + 4);
        state = "data";
      }
    }
  }
  if (state !== "done") throw invalid("the body ends before its closing boundary");
  if (!found) throw invalid('no part named "file"');
}
