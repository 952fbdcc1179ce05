import { createHash } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { FileService, ReadResponse, WriteRequestSchema } from "../../gen/sandbox/v1/files_pb.js";

/** A FileService client. */
export type FilesClient = Client<typeof FileService>;

type WritePart = MessageInitShape<typeof WriteRequestSchema>;

/** The messages of a Write: the header, then `data` in chunks of `chunkBytes`. */
export async function* writeParts(
  header: NonNullable<Extract<WritePart["part"], { case: "header" }>["value"]>,
  data: Uint8Array | AsyncIterable<Uint8Array> = new Uint8Array(),
  chunkBytes = 256 * 1024,
): AsyncGenerator<WritePart> {
  yield { part: { case: "header", value: header } };
  if (data instanceof Uint8Array) {
    for (let at = 0; at < data.length; at += chunkBytes)
      yield { part: { case: "data", value: data.subarray(at, at + chunkBytes) } };
  } else {
    for await (const chunk of data) yield { part: { case: "data", value: chunk } };
  }
}

/** Writes `data` to `path` with one Write call; resolves with the new stat. */
export async function writeFile(
  client: FilesClient,
  path: string,
  data: Uint8Array | string,
  header: Record<string, unknown> = {},
) {
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  return (await client.write(writeParts({ path, ...header }, bytes))).stat!;
}

/** Every event of a Read, and its bytes joined. */
export async function readFile(
  client: FilesClient,
  path: string,
  request: { offset?: bigint; length?: bigint } = {},
): Promise<{ events: ReadResponse["event"][]; data: Buffer }> {
  const events: ReadResponse["event"][] = [];
  const parts: Uint8Array[] = [];
  for await (const response of client.read({ path, ...request })) {
    events.push(response.event);
    if (response.event.case === "chunk") parts.push(response.event.value.data);
  }
  return { events, data: Buffer.concat(parts) };
}

/**
 * Bytes that are the same for the same length, any length, made fast: one pseudo-random block of
 * `chunkBytes`, each chunk a fresh copy of it with its index in its first 8 bytes.
 */
export function* patternChunks(totalBytes: number, chunkBytes = 1024 * 1024): Generator<Buffer> {
  const block = Buffer.alloc(chunkBytes);
  for (
    let offset = 0, seed = createHash("sha256").update("pattern").digest();
    offset < chunkBytes;
    offset += seed.length
  ) {
    seed.copy(block, offset);
    seed = createHash("sha256").update(seed).digest();
  }
  for (let at = 0, index = 0; at < totalBytes; at += chunkBytes, index++) {
    const chunk = Buffer.from(block.subarray(0, Math.min(chunkBytes, totalBytes - at)));
    if (chunk.length >= 8) chunk.writeBigUInt64LE(BigInt(index));
    yield chunk;
  }
}

/** The sha256 (hex) of {@link patternChunks} of `totalBytes`. */
export function patternSha256(totalBytes: number): string {
  const hash = createHash("sha256");
  for (const chunk of patternChunks(totalBytes)) hash.update(chunk);
  return hash.digest("hex");
}
