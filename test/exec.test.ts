import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessStatus, OutputStream } from "../gen/sandbox/v1/sandbox_pb.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

describe("Exec", () => {
  it("streams started first, output in arrival order, and exited last", async () => {
    const events = [];
    for await (const response of t.client.exec({ spec: { command: "printf out; printf err >&2; exit 3" } })) {
      events.push(response.event);
    }
    expect(events[0].case).toBe("started");
    expect(events.at(-1)?.case).toBe("exited");
    const output = events.flatMap((event) => (event.case === "output" ? [event.value] : []));
    const stdout = output.filter((chunk) => chunk.stream === OutputStream.STDOUT);
    const stderr = output.filter((chunk) => chunk.stream === OutputStream.STDERR);
    expect(Buffer.concat(stdout.map((chunk) => chunk.data)).toString()).toBe("out");
    expect(Buffer.concat(stderr.map((chunk) => chunk.data)).toString()).toBe("err");
    const exited = events.at(-1);
    if (exited?.case !== "exited") throw new Error("no exit");
    expect(exited.value.status).toBe(ProcessStatus.FAILED);
    expect(exited.value.exitCode).toBe(3);
    expect(exited.value.stdoutBytes).toBe(3n);
  });
});
