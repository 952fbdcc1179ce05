import { describe, expect, it } from "vitest";
import { FileError } from "../src/files/index.js";
import { multipartBoundary, multipartFile } from "../src/server/files/multipart.js";

// The multipart/form-data bodies of the REST PUT (KEP-539.2 accepts them beside raw bytes), parsed
// as a stream: the bytes of the part "file", whatever the chunks' boundaries.

const boundary = "----sandboxd-boundary-7";
const form = (parts: { name: string; data: string | Buffer }[], closing = true) =>
  Buffer.concat([
    ...parts.flatMap(({ name, data }) => [
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="x.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      ),
      Buffer.from(data),
      Buffer.from("\r\n"),
    ]),
    Buffer.from(closing ? `--${boundary}--\r\n` : ""),
  ]);

async function parse(body: Buffer, chunkSize: number): Promise<Buffer> {
  async function* chunks() {
    for (let at = 0; at < body.length; at += chunkSize) yield body.subarray(at, at + chunkSize);
  }
  const out: Buffer[] = [];
  for await (const chunk of multipartFile(chunks(), boundary)) out.push(Buffer.from(chunk));
  return Buffer.concat(out);
}

describe("multipart/form-data bodies", () => {
  it("yields exactly the bytes of the part named file, whatever the chunk sizes, skipping other parts", async () => {
    // Bytes that look like a boundary's start, CRLFs and dashes inside the file itself.
    const file = Buffer.concat([
      Buffer.from(`\r\n--${boundary.slice(0, 10)}\r\n--\r\n`),
      Buffer.alloc(3000, 0x2d),
      Buffer.from("end"),
    ]);
    const body = form([
      { name: "comment", data: "not this" },
      { name: "file", data: file },
      { name: "other", data: "nor this" },
    ]);
    for (const chunkSize of [1, 2, 3, 7, 64, 1000, body.length])
      expect(await parse(body, chunkSize), `chunks of ${chunkSize}`).toEqual(file);
  });

  it("refuses a body without a part named file, or cut before its closing boundary", async () => {
    await expect(parse(form([{ name: "comment", data: "x" }]), 5)).rejects.toThrow(FileError);
    await expect(parse(form([{ name: "file", data: "abc" }], false), 5)).rejects.toThrow(/closing boundary/);
  });

  it("reads the boundary of the content type, quoted or not", () => {
    expect(multipartBoundary(`multipart/form-data; boundary=${boundary}`)).toBe(boundary);
    expect(multipartBoundary('multipart/form-data; charset=utf-8; boundary="a b"')).toBe("a b");
    expect(multipartBoundary("application/octet-stream")).toBeUndefined();
    expect(() => multipartBoundary("multipart/form-data")).toThrow(FileError);
  });
});
