import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutputStream } from "../gen/sandbox/v1/sandbox_pb.js";
import { collectExec, deterministicBytes, ProcessStatus } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

let t: TestServer;
/** 20 KB of printable bytes without a newline: a terminal passes them through unchanged. */
const printed = Buffer.from(
  Array.from({ length: 20_000 }, (_, i) => "abcdefghijklmnopqrstuvwxyz0123456789"[(i * 7 + (i >> 5)) % 36]).join(""),
);

beforeAll(async () => {
  t = await startTestServer();
  writeFileSync(path.join(t.workspace, "twenty-kb.txt"), printed);
});
afterAll(async () => {
  await t.close();
});

describe("PTY output completeness", () => {
  it("delivers every byte of a fast 20 KB printer that exits at once, in 500 of 500 runs", async () => {
    const runs = 500;
    const concurrency = 4;
    const failures: string[] = [];
    const startedAt = performance.now();
    let next = 0;
    async function worker(): Promise<void> {
      while (next < runs) {
        const run = next++;
        const result = await collectExec(t.client, {
          command: "cat",
          args: ["twenty-kb.txt"],
          pty: { cols: 80, rows: 24 },
        });
        const ok =
          result.exited.status === ProcessStatus.COMPLETED &&
          result.stdout.equals(printed) &&
          result.stderr.length === 0;
        if (!ok)
          failures.push(
            `run ${run}: status ${result.exited.status}, ${result.stdout.length} of ${printed.length} bytes`,
          );
        expect(result.chunks.every((chunk) => chunk.stream === OutputStream.STDOUT)).toBe(true);
      }
    }
    await Promise.all(Array.from({ length: concurrency }, worker));
    console.log(
      `PTY completeness: ${runs - failures.length} of ${runs} runs complete in ${((performance.now() - startedAt) / 1000).toFixed(1)} s`,
    );
    expect(failures).toEqual([]);
  }, 120_000);

  it("keeps the last bytes of a shell that prints and exits, with and without a trailing newline", async () => {
    for (let run = 0; run < 50; run++) {
      const tail = `tail-${run}`;
      const result = await collectExec(t.client, { command: `cat twenty-kb.txt; printf '${tail}'`, pty: {} });
      expect(result.stdout.toString().endsWith(tail)).toBe(true);
      expect(result.stdout.length).toBe(printed.length + tail.length);
    }
    // The terminal turns \n into \r\n: that is the terminal, not loss.
    const lines = await collectExec(t.client, { command: "printf 'one\\ntwo\\n'", pty: {} });
    expect(lines.stdout.toString()).toBe("one\r\ntwo\r\n");
  });

  it("gives a slow Exec caller every byte of a PTY command, pausing the terminal rather than dropping", async () => {
    // A small buffer, so the terminal is paused while the command still writes and exits into a full terminal.
    const small = await startTestServer({ outputCapacityBytes: 64 * 1024 });
    try {
      // Hex text: printable, no newlines for the terminal to translate.
      const text = Buffer.from(deterministicBytes(1024 * 1024).toString("hex"));
      writeFileSync(path.join(small.workspace, "two-mb.txt"), text);
      for (let run = 0; run < 3; run++) {
        const received: Uint8Array[] = [];
        for await (const response of small.client.exec({ spec: { command: "cat", args: ["two-mb.txt"], pty: {} } })) {
          if (response.event.case !== "output") continue;
          received.push(response.event.value.data);
          if (received.length % 16 === 0) await new Promise((resolve) => setTimeout(resolve, 5));
        }
        expect(Buffer.concat(received).equals(text)).toBe(true);
      }
    } finally {
      await small.close();
    }
  }, 60_000);

  it("merges stderr into stdout, as a terminal has one output", async () => {
    const result = await collectExec(t.client, { command: "printf out; printf err >&2", pty: {} });
    expect(result.stdout.toString()).toBe("outerr");
    expect(result.stderr.length).toBe(0);
    expect(result.started.pty).toBe(true);
  });

  it("reports the terminal size it was given and runs with TERM set", async () => {
    const result = await collectExec(t.client, { command: 'stty size; printf "$TERM"', pty: { cols: 123, rows: 45 } });
    expect(result.stdout.toString()).toBe("45 123\r\nxterm-256color");
  });
});
