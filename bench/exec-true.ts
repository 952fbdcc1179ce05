import type { Client } from "@connectrpc/connect";
import type { SandboxService } from "../gen/sandbox/v1/sandbox_pb.js";

/**
 * Runs `true` through Exec (a shell command line, as a user types it), or `spec` when given, and
 * reads the stream to its end; throws unless it exited 0. The one call every figure times, against
 * the daemon and against the floor servers alike.
 */
export async function execTrue(
  client: Client<typeof SandboxService>,
  spec: { command: string; args?: string[] } = { command: "true" },
): Promise<void> {
  let exitCode: number | undefined;
  for await (const event of client.exec({ spec })) {
    if (event.event.case === "exited") exitCode = event.event.value.exitCode;
  }
  if (exitCode !== 0) throw new Error(`exec(${JSON.stringify(spec)}) exited with ${exitCode}`);
}
