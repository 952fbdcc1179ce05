import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect } from "../src/client/index.js";
import { startH2FrameCounter, type H2FrameCounter } from "./support/h2-frame-counter.js";
import { startTestServer, type TestServer } from "./support/server.js";

const rstStream = 0x3;

describe("a finished command's call ends with its trailers, not a reset", () => {
  let t: TestServer;
  let counter: H2FrameCounter;
  beforeAll(async () => {
    t = await startTestServer();
    counter = await startH2FrameCounter({ host: "127.0.0.1", port: t.server.port });
  });
  afterAll(async () => {
    await counter.close();
    await t.close();
  });

  it("sequential execs on one connection send no RST_STREAM (the daemon's HTTP/2 layer closes a connection past ~1,000 of them)", async () => {
    const sandbox = await connect({ baseUrl: counter.url });
    try {
      for (let i = 0; i < 40; i++) {
        const result = await sandbox.exec(`echo ${i}`);
        expect(result.stdout).toBe(`${i}\n`);
      }
      const background = await sandbox.startProcess("echo background");
      expect((await background.wait()).exitCode).toBe(0);
      expect(counter.framesOfType(rstStream)).toBe(0);
      expect(counter.serverGoAwayCodes).toEqual([]);
    } finally {
      await sandbox.close();
    }
  });
});
