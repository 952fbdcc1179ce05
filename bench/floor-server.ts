/**
 * The floor under sandboxd's RPC figures: a connect-node server of the same SandboxService with the
 * daemon's transport settings whose Exec runs nothing. An Exec of `true` answers the two events a
 * real one sends (`started`, `exited`) at once; an Exec of `stream N [SIZE]` answers N bytes as
 * OutputChunk messages of SIZE bytes (64 KiB by default, the read size of a pipe) from one
 * preallocated buffer; an Exec of `spawn LINE` runs `/bin/sh -c LINE` with Node's own `child_process`
 * (its own process group, stdout and stderr on pipes, as the daemon starts a command), answers its
 * output as it is read and its exit: the least a Node server that runs commands does per Exec. What
 * this process costs
 * per call and per MB is what connect-es, protobuf-es and Node's HTTP/2 cost before a process, a
 * pipe or anything of sandboxd's runs (bench/figures/connect-floor.ts).
 *
 * Logs `listening on <url>` on stderr once it serves, as the daemon does; runs until killed.
 */
import { spawn } from "node:child_process";
import http2 from "node:http2";
import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  ExecResponseSchema,
  OutputStream,
  ProcessStatus,
  SandboxService,
  type ExecRequest,
  type ExecResponse,
} from "../gen/sandbox/v1/sandbox_pb.js";

/** The default size of one output message: what a pipe read gives the daemon. */
const defaultChunkBytes = 64 * 1024;
/** One preallocated buffer per message size asked for. */
const chunks = new Map<number, Uint8Array>();

async function* exec(request: ExecRequest): AsyncGenerator<ExecResponse> {
  const spec = request.spec;
  const startTime = timestampNow();
  yield create(ExecResponseSchema, {
    event: {
      case: "started",
      value: {
        processId: "floor",
        pid: process.pid,
        command: spec?.command ?? "",
        args: spec?.args ?? [],
        status: ProcessStatus.RUNNING,
        cwd: "/",
        startTime,
      },
    },
  });
  if (spec?.command === "spawn") {
    yield* spawned(spec.args[0] ?? "true", startTime);
    return;
  }
  if (spec?.command === "stream") {
    const total = BigInt(spec.args[0] ?? "0");
    const chunkBytes = Number(spec.args[1] ?? defaultChunkBytes);
    let chunk = chunks.get(chunkBytes);
    if (chunk === undefined) chunks.set(chunkBytes, (chunk = new Uint8Array(chunkBytes)));
    for (let offset = 0n; offset < total; offset += BigInt(chunkBytes)) {
      const left = total - offset;
      const data = left < chunkBytes ? chunk.subarray(0, Number(left)) : chunk;
      yield create(ExecResponseSchema, {
        event: { case: "output", value: { stream: OutputStream.STDOUT, offset, data } },
      });
    }
  }
  yield create(ExecResponseSchema, {
    event: {
      case: "exited",
      value: { status: ProcessStatus.COMPLETED, exitCode: 0, startTime, endTime: timestampNow() },
    },
  });
}

/** Runs `line` through `/bin/sh -c` with child_process and answers its output as read, then its exit. */
async function* spawned(line: string, startTime: ReturnType<typeof timestampNow>): AsyncGenerator<ExecResponse> {
  const child = spawn("/bin/sh", ["-c", line], { stdio: ["ignore", "pipe", "pipe"], detached: true });
  const pending: ExecResponse[] = [];
  const offsets = [0n, 0n];
  let wake: (() => void) | undefined;
  let exitCode: number | undefined;
  const push = (response: ExecResponse) => {
    pending.push(response);
    wake?.();
  };
  for (const [index, stream] of [child.stdout, child.stderr].entries()) {
    stream.on("data", (data: Buffer) => {
      const offset = offsets[index]!;
      offsets[index] = offset + BigInt(data.length);
      push(
        create(ExecResponseSchema, {
          event: {
            case: "output",
            value: { stream: index === 0 ? OutputStream.STDOUT : OutputStream.STDERR, offset, data },
          },
        }),
      );
    });
  }
  // "close": the exit and the end of both pipes.
  child.once("close", (code) => {
    exitCode = code ?? -1;
    wake?.();
  });
  try {
    for (;;) {
      while (pending.length > 0) yield pending.shift()!;
      if (exitCode !== undefined) break;
      await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
    }
  } finally {
    // A call that ends early (the client went away) leaves no command behind.
    if (exitCode === undefined) {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
  }
  yield create(ExecResponseSchema, {
    event: {
      case: "exited",
      value: { status: ProcessStatus.COMPLETED, exitCode, startTime, endTime: timestampNow() },
    },
  });
}

const handler = connectNodeAdapter({
  routes: (router: ConnectRouter) => router.service(SandboxService, { exec }),
  // As the daemon: never compress responses.
  compressMinBytes: 2 ** 31 - 1,
});
// The daemon's HTTP/2 settings (src/server/server.ts).
const server = http2.createServer({ settings: { initialWindowSize: 4 * 1024 * 1024 } }, handler);
server.on("connection", (socket: import("node:net").Socket) => socket.setNoDelay(true));
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  process.stderr.write(
    `listening on http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}\n`,
  );
});
process.on("SIGTERM", () => process.exit(0));
