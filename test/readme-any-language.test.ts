import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "./support/server.js";
import { parseJsonStream, repositoryRoot, runCommand, tool } from "./support/tools.js";

/** The ```sh blocks of the README's "From any language" section, in order. */
function sectionBlocks(): string[] {
  const readme = readFileSync(path.join(repositoryRoot, "README.md"), "utf8");
  const start = readme.indexOf("\n## From any language\n");
  expect(start).toBeGreaterThan(0);
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]);
}

const base64 = (text: string) => Buffer.from(text).toString("base64");

/** What each block must print, in the README's order. */
const expectations: ((stdout: string) => void)[] = [
  (stdout) => {
    for (const service of ["grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "sandbox.v1.SandboxService"])
      expect(stdout).toContain(`${service}\n`);
    expect(stdout).toContain("rpc Exec ( .sandbox.v1.ExecRequest ) returns ( stream .sandbox.v1.ExecResponse );");
  },
  (stdout) => {
    const events = parseJsonStream(stdout) as Record<string, Record<string, unknown>>[];
    expect(Object.keys(events[0])).toEqual(["started"]);
    expect(events.at(-1)!.exited.status).toBe("PROCESS_STATUS_COMPLETED");
    expect(stdout).toContain(base64("hello\n"));
    expect(stdout).toContain(base64("oops\n"));
  },
  (stdout) => {
    const events = parseJsonStream(stdout) as Record<string, Record<string, unknown>>[];
    expect(events[0].process.processId).toBe("ticker");
    const output = events.flatMap((event) =>
      event.output ? [Buffer.from(event.output.data as string, "base64")] : [],
    );
    expect(Buffer.concat(output).toString()).toBe("tick 1\ntick 2\ntick 3\n");
    expect(events.at(-1)!.exited.status).toBe("PROCESS_STATUS_COMPLETED");
  },
  (stdout) => {
    const messages = parseJsonStream(stdout) as Record<string, Record<string, unknown>>[];
    expect(messages.slice(1, 4)).toEqual([{}, { bytesWritten: "6" }, { bytesWritten: "6", closed: true }]);
    expect(stdout).toContain(base64("HELLO\n"));
  },
  (stdout) => expect(parseJsonStream(stdout)).toEqual([{ status: "SERVING" }, { status: "SERVING" }]),
  (stdout) => {
    const [error] = parseJsonStream(stdout) as Record<string, any>[];
    expect(error).toEqual({
      code: 5,
      message: "process not found: no-such-process",
      details: [
        {
          "@type": "type.googleapis.com/google.rpc.ErrorInfo",
          reason: "PROCESS_NOT_FOUND",
          domain: "sandbox.v1",
          metadata: { process_id: "no-such-process" },
        },
      ],
    });
  },
  (stdout) => {
    const [started, list, missing] = parseJsonStream(stdout) as Record<string, any>[];
    expect(started.process.processId).toBe("sleeper");
    expect(list.processes.map((process: { processId: string }) => process.processId)).toContain("sleeper");
    expect(missing).toMatchObject({
      code: "not_found",
      details: [
        {
          type: "google.rpc.ErrorInfo",
          debug: { reason: "PROCESS_NOT_FOUND", domain: "sandbox.v1", metadata: { process_id: "no-such-process" } },
        },
      ],
    });
  },
  (stdout) => {
    const lines = stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    expect(Object.keys(lines[0])).toEqual(["started"]);
    expect(lines.at(-2).exited.status).toBe("PROCESS_STATUS_COMPLETED");
    expect(lines.at(-1)).toEqual({});
    expect(stdout).toContain(base64("hello\n"));
  },
  (stdout) => {
    expect(stdout).toContain("sandbox.v1.SandboxService\n");
    expect(stdout).toContain(base64("hello\n"));
    expect(stdout).toContain('"processes"');
    expect(stdout).toContain('"status": "SERVING"');
  },
];

describe("the README's From any language commands, as written", () => {
  let test: TestServer;
  const blocks = sectionBlocks();

  beforeAll(async () => {
    tool("grpcurl");
    test = await startTestServer();
  });
  afterAll(async () => {
    await test.close();
  });

  it("has one expectation per block", () => {
    expect(blocks).toHaveLength(expectations.length);
  });

  blocks.forEach((block, index) => {
    it(`runs block ${index + 1}: ${block.split("\n")[0]}`, async () => {
      const script = block.replaceAll("127.0.0.1:7007", `127.0.0.1:${test.server.port}`);
      const result = await runCommand("bash", ["-e", "-o", "pipefail", "-c", script], { timeoutMs: 30_000 });
      expect(result.stderr.replace(/^npm warn .*\n/gm, "")).toBe("");
      expect(result.code).toBe(0);
      expectations[index](result.stdout);
    });
  });
});
