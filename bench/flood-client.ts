/**
 * An attacker without the token, as a process of its own on the daemon's machine: `connections`
 * HTTP/2 connections, each keeping `streams` calls in flight, a new one sent as each is answered,
 * and a connection made again whenever the daemon closes one. Two kinds:
 *
 *     unauthenticated   Exec with headers only (no token, no body, never ended)
 *     watch             grpc.health.v1.Health/Watch with an empty request (no token needed)
 *
 * Run as `node --import tsx bench/flood-client.ts <url> <kind> <connections> <streams>`. Prints
 * `flooding` on stdout once every connection has had the headers of a first answer, and on SIGTERM one JSON line:
 * answers by grpc-status (or `reset` for streams reset without one), connections made, seconds.
 */
import http2 from "node:http2";

const [url, kind, connectionCount, streamCount] = process.argv.slice(2);
if (url === undefined || (kind !== "unauthenticated" && kind !== "watch")) {
  process.stderr.write("usage: flood-client.ts <url> unauthenticated|watch <connections> <streams>\n");
  process.exit(2);
}
const connections = Number(connectionCount ?? 100);
const streams = Number(streamCount ?? 272);
const answers = new Map<string, number>();
let connectionsMade = 0;
let answered = 0;
const began = performance.now();
const answeredFirst = new Set<number>();
let announced = false;

const headers: http2.OutgoingHttpHeaders =
  kind === "unauthenticated"
    ? {
        ":method": "POST",
        ":path": "/sandbox.v1.SandboxService/Exec",
        "content-type": "application/grpc",
        te: "trailers",
      }
    : {
        ":method": "POST",
        ":path": "/grpc.health.v1.Health/Watch",
        "content-type": "application/grpc",
        te: "trailers",
      };
const emptyMessage = Buffer.alloc(5);

function count(status: string): void {
  answers.set(status, (answers.get(status) ?? 0) + 1);
  answered++;
}

/** Notes that a connection slot got the headers of an answer (a refusal, or a Watch's first); announces the flood once all did. */
function heard(slot: number): void {
  answeredFirst.add(slot);
  if (!announced && answeredFirst.size >= connections) {
    announced = true;
    process.stdout.write("flooding\n");
  }
}

/** One connection slot: a session kept full of calls, made again when the daemon closes it. */
function connect(slot: number): void {
  connectionsMade++;
  const session = http2.connect(url!);
  session.on("error", () => {});
  let open = true;
  session.once("close", () => {
    open = false;
    if (!stopping) setTimeout(() => connect(slot), 10);
  });
  const send = () => {
    if (!open || session.destroyed || session.closed) return;
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request(headers, { endStream: false });
    } catch {
      return;
    }
    let status: string | undefined;
    stream.on("response", (response) => {
      status = response["grpc-status"] as string | undefined;
      heard(slot);
    });
    stream.on("trailers", (trailers) => {
      status ??= trailers["grpc-status"] as string | undefined;
    });
    stream.on("error", () => {});
    stream.on("close", () => {
      count(status ?? "reset");
      send();
    });
    if (kind === "watch") stream.end(emptyMessage);
    stream.resume();
  };
  session.once("remoteSettings", () => {
    for (let index = 0; index < streams; index++) send();
  });
}

let stopping = false;
for (let slot = 0; slot < connections; slot++) connect(slot);
process.once("SIGTERM", () => {
  stopping = true;
  process.stdout.write(
    `${JSON.stringify({ answers: Object.fromEntries(answers), answered, connectionsMade, seconds: (performance.now() - began) / 1000 })}\n`,
  );
  process.exit(0);
});
