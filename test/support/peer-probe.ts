/**
 * A client run from another network namespace (`ip netns exec <ns> node --import tsx peer-probe.ts <json>`),
 * so the daemon sees a peer that is not this machine. It makes the calls it is given, one after the
 * other, each on a fresh connection, and prints a JSON array of what each got.
 *
 * A call is `{ "kind": "rest", "url", "method", "token"?, "body"?, "headers"? }` (status and body text),
 * `{ "kind": "execute", "url", "token"? }` (process.v1 Execute of `echo peer` (argv)) or
 * `{ "kind": "exec", "url", "token"? }` (sandbox.v1 Exec of `echo peer`); an RPC answers its stdout or
 * its code and ErrorInfo reason.
 */
import http from "node:http";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { ProcessService } from "../../gen/process/v1/process_pb.js";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { errorInfos } from "./errors.js";

type Call =
  | { kind: "rest"; url: string; method: string; token?: string; body?: string; headers?: Record<string, string> }
  | { kind: "execute" | "exec"; url: string; token?: string };

/** What one call got. */
type Answer = { status: number; body: string } | { stdout: string } | { code: string; reason?: string };

async function rest(call: Extract<Call, { kind: "rest" }>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = {
      ...call.headers,
      ...(call.token === undefined ? {} : { authorization: `Bearer ${call.token}` }),
    };
    const request = http.request(call.url, { method: call.method, headers, agent: false }, (response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    request.on("error", reject);
    request.end(call.body);
  });
}

async function rpc(call: Extract<Call, { kind: "execute" | "exec" }>): Promise<Answer> {
  const interceptors: Interceptor[] =
    call.token === undefined
      ? []
      : [
          (next) => (request) => {
            request.header.set("authorization", `Bearer ${call.token}`);
            return next(request);
          },
        ];
  const transport = createGrpcTransport({ baseUrl: call.url, interceptors });
  try {
    if (call.kind === "execute") {
      const answer = await createClient(ProcessService, transport).execute({ config: { command: ["echo", "peer"] } });
      return { stdout: Buffer.from(answer.stdout).toString() };
    }
    let stdout = "";
    for await (const event of createClient(SandboxService, transport).exec({ spec: { command: "echo peer" } })) {
      if (event.event.case === "output") stdout += Buffer.from(event.event.value.data).toString();
    }
    return { stdout };
  } catch (error) {
    const connectError = ConnectError.from(error);
    return { code: Code[connectError.code], reason: errorInfos(connectError)[0]?.reason };
  }
}

const answers: Answer[] = [];
for (const call of JSON.parse(process.argv[2]) as Call[]) {
  answers.push(call.kind === "rest" ? await rest(call) : await rpc(call));
}
process.stdout.write(JSON.stringify(answers));
