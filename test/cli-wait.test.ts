import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "./support/cli.js";
import { sleepMarker } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

// `sandbox wait port|log|exit` and `sandbox ports` against a real daemon running real servers.
let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t.close();
});

const cli = (args: readonly string[]) => runCli(args, { url: t.server.url, timeoutMs: 60_000 });
const text = (result: { stdout: Buffer; stderr: Buffer; code: number | null }) => ({
  code: result.code,
  stdout: result.stdout.toString(),
  stderr: result.stderr.toString(),
});

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("sandbox wait and sandbox ports", { timeout: 120_000 }, () => {
  it("waits for a server that binds late, finds its log line, lists its port, and waits for its exit code", async () => {
    const port = await freePort();
    await t.client.startProcess({
      spec: {
        command: `echo booting; sleep 1.5; echo "serving on ${port}"; exec python3 -m http.server ${port} --bind 127.0.0.1`,
        processId: "cli-web",
      },
    });
    expect(text(await cli(["wait", "port", String(port), "--process", "cli-web", "--timeout", "30s"]))).toEqual({
      code: 0,
      stdout: `127.0.0.1:${port}\n`,
      stderr: "",
    });
    const http = JSON.parse(
      (await cli(["wait", "port", String(port), "--path", "/", "--status", "200-299", "-o", "json"])).stdout.toString(),
    );
    expect(http).toMatchObject({ address: `127.0.0.1:${port}`, httpStatus: 200 });
    expect(text(await cli(["wait", "log", "cli-w", "serving on \\d+", "--timeout", "10s"]))).toEqual({
      code: 0,
      stdout: `serving on ${port}\n`,
      stderr: "",
    });
    const table = (await cli(["ports"])).stdout.toString();
    expect(table.split("\n")[0]).toMatch(/^PORT +ADDRESS +PID +PROGRAM +PROCESS$/);
    expect(table).toMatch(new RegExp(`^${port} +127\\.0\\.0\\.1 +\\d+ +python3 +cli-web$`, "m"));
    const listed = JSON.parse((await cli(["ports", "--process", "cli-web", "-o", "json"])).stdout.toString());
    expect(listed).toEqual([
      { port, address: "127.0.0.1", ipv6: false, pid: expect.any(Number), program: "python3", processId: "cli-web" },
    ]);
    await t.client.killProcess({ processId: "cli-web", signal: "SIGTERM" });
    expect(text(await cli(["wait", "exit", "cli-web", "--timeout", "30s"]))).toEqual({
      code: 0,
      stdout: "143\n",
      stderr: "",
    });
  });

  it("fails with exit code 1 and the last output lines when the timeout passes or the process exits first", async () => {
    const port = await freePort();
    await t.client.startProcess({
      spec: { command: `echo 'compiling...'; echo 'slow disk' >&2; sleep ${sleepMarker(60)}`, processId: "cli-slow" },
    });
    await cli(["wait", "log", "cli-slow", "slow disk", "--stream", "stderr", "--timeout", "10s"]);
    expect(text(await cli(["wait", "port", String(port), "--process", "cli-slow", "--timeout", "1s"]))).toEqual({
      code: 1,
      stdout: "",
      stderr: expect.stringMatching(
        new RegExp(
          `^sandbox: timed out after 1000 ms waiting for port ${port} of process cli-slow; last stdout: compiling\\.\\.\\.; last stderr: slow disk; last try: 127\\.0\\.0\\.1:${port}: connection refused(; .*)?\\n$`,
        ),
      ),
    });
    await t.client.killProcess({ processId: "cli-slow", signal: "SIGKILL" });

    await t.client.startProcess({ spec: { command: "echo 'missing module' >&2; exit 1", processId: "cli-crash" } });
    expect(text(await cli(["wait", "log", "cli-crash", "ready"]))).toEqual({
      code: 1,
      stdout: "",
      stderr: "sandbox: process cli-crash exited before log /ready/ (exit code 1); last stderr: missing module\n",
    });
  });

  it("refuses bad usage with exit code 2", async () => {
    expect((await cli(["wait", "port", "70000"])).code).toBe(2);
    expect(text(await cli(["wait", "port", "80", "--status", "ok"])).stderr).toMatch(
      /^sandbox: .*--status.*\(see 'sandbox wait port --help'\)\n$/,
    );
    expect((await cli(["wait", "log", "anything", "("])).code).toBe(2);
    expect(text(await cli(["wait", "exit", "no-such-process"]))).toMatchObject({
      code: 1,
      stderr: "sandbox: no such process: no-such-process\n",
    });
  });
});
