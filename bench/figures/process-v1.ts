import { createServer } from "node:net";
import { createClient } from "@connectrpc/connect";
import { ProcessService } from "../../gen/process/v1/process_pb.js";
import { createSandboxConnection } from "../../src/client/core/transport.js";
import type { Daemon } from "../daemon.js";
import { ratioRow, type Row } from "../report.js";
import type { BenchSize } from "../size.js";
import { percentile, timeMs } from "../stats.js";
import { execTrue } from "../exec-true.js";

/** A port free on loopback now, for a daemon flag that takes a port (`--agent-sandbox-grpc-port`). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * process.v1 (KEP-539.2) Execute of `true` through the daemon's agent-sandbox gRPC port, one at a time, beside
 * sandboxd's own Exec of `true` on its own port in the same run: what the compat surface costs over the
 * daemon's own API. Both clients use the client's transport (one HTTP/2 connection each); rounds alternate.
 */
export async function measureProcessV1Execute(daemon: Daemon, size: BenchSize, grpcPort: number): Promise<Row[]> {
  const connection = createSandboxConnection({ baseUrl: `http://127.0.0.1:${grpcPort}`, acceptCompression: false });
  try {
    const processes = createClient(ProcessService, connection.transport);
    const executeTrue = async () => {
      const result = await processes.execute({ config: { command: ["true"] } });
      if (result.exitCode !== 0) throw new Error(`Execute of true exited with ${result.exitCode}`);
    };
    const warmUp = Math.min(20, size.sequentialCalls);
    for (let index = 0; index < warmUp; index++) {
      await executeTrue();
      await execTrue(daemon.client);
    }
    const execute: number[] = [];
    const exec: number[] = [];
    const rounds = 5;
    const perRound = Math.ceil(size.sequentialCalls / rounds);
    for (let round = 0; round < rounds; round++) {
      for (let index = 0; index < perRound; index++) execute.push(await timeMs(executeTrue));
      for (let index = 0; index < perRound; index++) exec.push(await timeMs(() => execTrue(daemon.client)));
    }
    return [
      ratioRow(
        {
          id: "process-v1-execute-p50",
          figure: 'process.v1 Execute("true") p50, agent-sandbox port (baseline: own Exec)',
          unit: "ms",
          value: percentile(execute, 0.5),
          baseline: percentile(exec, 0.5),
          note: `${execute.length} calls each; the baseline is sandboxd's own Exec of true in the same run, not a bare spawn`,
        },
        "max",
        1.1,
      ),
    ];
  } finally {
    connection.close();
  }
}
