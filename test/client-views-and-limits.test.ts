import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, ExecutionTimeoutError, type ExecEvent, type Sandbox } from "../src/client/index.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
let sandbox: Sandbox;
beforeAll(async () => {
  t = await startTestServer();
  sandbox = await connect({ baseUrl: t.server.url, timeoutMs: 1500 });
});
afterAll(async () => {
  await sandbox.close({ killProcesses: true });
  await t.close();
});

describe("a time limit's error says which limit, its unit and where it came from", () => {
  it("the sandbox's default, and how to lift it", async () => {
    const error = await sandbox.exec("echo started; sleep 40").catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(ExecutionTimeoutError);
    expect((error as ExecutionTimeoutError).timeout).toBe(1500);
    expect((error as Error).message).toBe(
      "the command ran past its time limit and was killed (SIGKILL): 1500 ms, the sandbox's default for waiting calls " +
        "(give exec a timeout in milliseconds, or connect({ timeoutMs }) for the whole sandbox; 0 for none)",
    );
  });

  it("the call's own timeout, in execStream too", async () => {
    const error = await sandbox.exec("sleep 40", { timeout: 300 }).catch((failure: unknown) => failure);
    expect((error as Error).message).toBe(
      "the command ran past its time limit and was killed (SIGKILL): timeout 300 ms, the timeout option of exec (in milliseconds)",
    );
    const events: ExecEvent[] = [];
    for await (const event of sandbox.execStream("sleep 40", { timeout: 300 })) events.push(event);
    expect(events.at(-1)?.error?.message).toBe(
      "the command ran past its time limit and was killed (SIGKILL): timeout 300 ms, the timeout option of execStream (in milliseconds)",
    );
  });
});

describe("output as text and as bytes, in every shape", () => {
  it("execStream events carry data (text, whole characters) and bytes (exactly as written)", async () => {
    const events: ExecEvent[] = [];
    for await (const event of sandbox.execStream("printf 'caf\\303'; sleep 0.2; printf '\\251\\n'; printf '\\377' >&2"))
      events.push(event);
    const stdout = events.filter((event) => event.type === "stdout");
    for (const event of stdout) expect(Buffer.isBuffer(event.bytes)).toBe(true);
    expect(Buffer.concat(stdout.map((event) => event.bytes!))).toEqual(Buffer.from("café\n"));
    expect(stdout.map((event) => event.data).join("")).toBe("café\n");
    const stderr = events.filter((event) => event.type === "stderr");
    expect(Buffer.concat(stderr.map((event) => event.bytes!))).toEqual(Buffer.from([0xff]));
    expect(stderr.map((event) => event.data).join("")).toBe("\ufffd");
  });

  it("exec results have stdoutBytes and stderrBytes beside the text; a handle's chunks print as text", async () => {
    const result = await sandbox.exec("printf 'tick\\n'; printf '\\377' >&2");
    expect(result.stdout).toBe("tick\n");
    // The text is decoded when first read, yet the result is a plain object to serialize, spread and assign.
    expect(JSON.parse(JSON.stringify(result))).toMatchObject({
      stdout: "tick\n",
      stderr: "\ufffd",
    });
    expect({ ...result }.stdout).toBe("tick\n");
    expect(result.stdoutBytes).toEqual(Buffer.from("tick\n"));
    expect(result.stderrBytes).toEqual(Buffer.from([0xff]));
    result.stdout = "changed";
    expect(result.stdout).toBe("changed");
    const handle = await sandbox.startProcess("printf tick");
    const printed: string[] = [];
    // A template string used to print "116,105,99,107": the chunk's data is a Buffer, whose text is its string.
    for await (const chunk of handle) printed.push(`${chunk.data}`);
    expect(printed.join("")).toBe("tick");
  });
});
