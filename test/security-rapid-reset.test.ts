import net from "node:net";
import { toBinary, create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { ExecRequestSchema } from "../gen/sandbox/v1/sandbox_pb.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { waitFor } from "./support/processes.js";
import { startTestServer, type TestServer } from "./support/server.js";

/** A gRPC request body: the 5-byte envelope and an Exec request for `command`. */
function execBody(command: string): Buffer {
  const message = toBinary(ExecRequestSchema, create(ExecRequestSchema, { spec: { command } }));
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(message.length, 1);
  return Buffer.concat([prefix, message]);
}

/** An HTTP/2 frame: 9-byte header and payload. */
function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = type;
  header[4] = flags;
  header.writeUInt32BE(streamId, 5);
  return Buffer.concat([header, payload]);
}

/** HPACK: each header as a literal without indexing, new name, no Huffman (lengths under 127). */
function headerBlock(headers: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of Object.entries(headers)) {
    parts.push(Buffer.from([0, name.length]), Buffer.from(name), Buffer.from([value.length]), Buffer.from(value));
  }
  return Buffer.concat(parts);
}

describe("Exec calls the client resets at once (HEADERS, DATA, RST_STREAM)", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("start (almost) nothing, leave nothing running, and cost the connection past the reset limit", async () => {
    test = await startTestServer({ token: "reset-token" }, { sendToken: true });
    const marker = sleepMarker(30);
    // Raw frames, as an attacker writes them: HEADERS, DATA and RST_STREAM of each call back to back.
    const socket = net.connect(test.server.port, "127.0.0.1");
    socket.on("error", () => {});
    socket.resume();
    const closed = new Promise<void>((resolve) => socket.once("close", resolve));
    await new Promise((resolve) => socket.once("connect", resolve));
    const block = headerBlock({
      ":method": "POST",
      ":scheme": "http",
      ":path": "/sandbox.v1.SandboxService/Exec",
      ":authority": `127.0.0.1:${test.server.port}`,
      "content-type": "application/grpc",
      te: "trailers",
      authorization: "Bearer reset-token",
    });
    const body = execBody(`sleep ${marker}`);
    const cancel = Buffer.alloc(4);
    cancel.writeUInt32BE(8);
    const frames: Buffer[] = [Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), frame(4, 0, 0, Buffer.alloc(0))];
    const sent = 2000;
    for (let index = 0; index < sent; index++) {
      const id = 2 * index + 1;
      frames.push(frame(1, 0x4, id, block), frame(0, 0x1, id, body), frame(3, 0, id, cancel));
    }
    socket.write(Buffer.concat(frames));
    // The daemon closes the connection once the resets pass its limit.
    await closed;
    const started = test.server.manager.list().length;
    // Of the calls read before the connection was closed, (almost) none ran: each was seen as reset
    // before its spawn, but for one whose reset fell into the next read of the socket.
    expect(started).toBeLessThan(5);
    await waitFor(() => sleepers(marker).length === 0, { what: "every started sleep to be gone" });
    // And an honest call is served at once.
    const listed = await test.client.listProcesses({});
    expect(listed.processes.every((process) => process.exit !== undefined)).toBe(true);
  });
});
