// The browser test's page script (bundled by esbuild, run by headless Chromium; see run.ts): from its own
// origin it calls a real daemon on another origin with @connectrpc/connect-web, once over the Connect
// protocol and once over gRPC-Web, and leaves what it saw in globalThis.sandboxdResults.
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { OutputStream, SandboxService } from "../../../gen/sandbox/v1/sandbox_pb.js";

/** The page's address (the DOM library is not part of the project's type check). */
declare const location: { readonly search: string; readonly origin: string };

/** One check the page ran, as run.ts reads it. */
export interface PageResult {
  name: string;
  ok: boolean;
  detail: string;
}

const params = new URLSearchParams(location.search);
const daemon = params.get("daemon") ?? "";
const token = params.get("token") ?? "";
const results: PageResult[] = [];

function check(name: string, ok: boolean, detail: string): void {
  results.push({ name, ok, detail });
}

function transports(withToken: string): Record<string, Transport> {
  const bearer: Interceptor = (next) => (request) => {
    request.header.set("authorization", `Bearer ${withToken}`);
    return next(request);
  };
  const interceptors = [bearer];
  return {
    connect: createConnectTransport({ baseUrl: daemon, interceptors }),
    "grpc-web": createGrpcWebTransport({ baseUrl: daemon, interceptors }),
  };
}

/**
 * Exec of a command that prints a line, then waits for a gate file that only the page creates (with a
 * second Exec) once that line has reached it, then prints more on both streams and exits 3. The output
 * can only be complete if the first line was streamed to the page while the command was still running.
 */
async function streamedExec(protocol: string, client: Client<typeof SandboxService>): Promise<void> {
  const gate = `gate-${protocol}-${Date.now()}`;
  const command = [
    "printf 'first\\n'",
    `i=0; while [ ! -e ${gate} ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 9; sleep 0.01; done`,
    "printf 'second\\n'; printf 'oops\\n' >&2; exit 3",
  ].join("; ");
  const decoder = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  let stdout = "";
  let stderr = "";
  let exitCode: number | undefined;
  let started = false;
  let gateOpened = false;
  for await (const response of client.exec({ spec: { command, timeoutMs: 20_000 } })) {
    const event = response.event;
    if (event.case === "started") started = event.value.pid > 0;
    else if (event.case === "output") {
      if (event.value.stream === OutputStream.STDOUT)
        stdout += decoder.stdout.decode(event.value.data, { stream: true });
      else stderr += decoder.stderr.decode(event.value.data, { stream: true });
      if (!gateOpened && stdout.includes("first\n")) {
        gateOpened = true;
        for await (const gateResponse of client.exec({ spec: { command: `touch ${gate}` } })) {
          if (gateResponse.event.case === "exited" && gateResponse.event.value.exitCode !== 0)
            throw new Error(`touch ${gate} failed`);
        }
      }
    } else if (event.case === "exited") exitCode = event.value.exitCode;
  }
  const ok = started && gateOpened && stdout === "first\nsecond\n" && stderr === "oops\n" && exitCode === 3;
  check(
    `${protocol}: Exec streams output to the page while the command runs`,
    ok,
    JSON.stringify({ started, gateOpened, stdout, stderr, exitCode }),
  );
}

async function unaryCall(protocol: string, client: Client<typeof SandboxService>): Promise<void> {
  const response = await client.listProcesses({});
  check(
    `${protocol}: a unary call answers`,
    Array.isArray(response.processes),
    `${response.processes.length} processes`,
  );
}

async function refused(protocol: string, client: Client<typeof SandboxService>): Promise<void> {
  try {
    for await (const _ of client.exec({ spec: { command: "echo should-not-run" } })) {
      // Nothing is expected.
    }
    check(`${protocol}: a wrong token is refused with UNAUTHENTICATED`, false, "the call succeeded");
  } catch (error) {
    const code = ConnectError.from(error).code;
    check(
      `${protocol}: a wrong token is refused with UNAUTHENTICATED`,
      code === Code.Unauthenticated,
      `code ${Code[code]}: ${ConnectError.from(error).rawMessage}`,
    );
  }
}

async function notFound(protocol: string, client: Client<typeof SandboxService>): Promise<void> {
  try {
    await client.getProcess({ processId: "no-such-process" });
    check(`${protocol}: an unknown process is NOT_FOUND`, false, "the call succeeded");
  } catch (error) {
    const code = ConnectError.from(error).code;
    check(`${protocol}: an unknown process is NOT_FOUND`, code === Code.NotFound, `code ${Code[code]}`);
  }
}

/** On a page of an origin the daemon does not allow, the browser must keep the answer from the page. */
async function blocked(protocol: string, client: Client<typeof SandboxService>): Promise<void> {
  try {
    await client.listProcesses({});
    check(`${protocol}: the browser blocks the call (CORS)`, false, "the call succeeded");
  } catch (error) {
    // fetch() rejects with a TypeError, which connect-web reports without a status from the daemon.
    const connectError = ConnectError.from(error);
    check(
      `${protocol}: the browser blocks the call (CORS)`,
      connectError.code === Code.Unknown,
      `code ${Code[connectError.code]}: ${connectError.rawMessage}`,
    );
  }
}

async function main(): Promise<void> {
  const good = transports(token);
  if (params.get("mode") === "blocked") {
    for (const protocol of Object.keys(good)) await blocked(protocol, createClient(SandboxService, good[protocol]));
    return;
  }
  const bad = transports(`${token}-wrong`);
  for (const protocol of Object.keys(good)) {
    const client = createClient(SandboxService, good[protocol]);
    for (const run of [streamedExec, unaryCall, notFound]) {
      try {
        await run(protocol, client);
      } catch (error) {
        check(`${protocol}: ${run.name}`, false, `threw ${String(error)}`);
      }
    }
    await refused(protocol, createClient(SandboxService, bad[protocol]));
  }
}

const done = main().catch((error: unknown) => check("page", false, `threw ${String(error)}`));
(globalThis as { sandboxdResults?: Promise<PageResult[]> }).sandboxdResults = done.then(() => results);
