#!/usr/bin/env node
import { startServer, type SandboxServer, type SandboxServerOptions } from "../server/index.js";
import { parseCommandLine, usage } from "./options.js";

/** Starts the daemon from the command line and shuts it down gracefully on SIGTERM or SIGINT. */
async function main(): Promise<void> {
  let command;
  try {
    command = parseCommandLine(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`sandboxd: ${(error as Error).message}\n\n${usage}`);
    process.exit(2);
  }
  // The token is read; nothing else in this process (nor a child by any path) needs it any more.
  delete process.env.SANDBOXD_TOKEN;
  if (command.help) {
    process.stdout.write(usage);
    return;
  }
  const server = await startServer(command.options);
  process.stderr.write(`sandboxd listening on ${server.url} (workspace ${server.manager.workspace.roots.join(":")})\n`);
  process.stderr.write(`sandboxd: ${securitySummary(command.options, server)}\n`);
  const stop = (signal: NodeJS.Signals) => {
    process.stderr.write(`sandboxd: ${signal}, shutting down\n`);
    const forced = setTimeout(() => process.exit(1), 10_000);
    forced.unref();
    void server.close().then(() => process.exit(0));
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
}

/** One line on how the daemon is guarded; never the token itself. */
function securitySummary(options: SandboxServerOptions, server: SandboxServer): string {
  const manager = server.manager;
  const access = options.token !== undefined ? "bearer token required" : options.insecure ? "NO TOKEN (--insecure)" : "no token (loopback only)";
  const user = options.runAs ? `${options.runAs.name} (uid ${options.runAs.uid})` : "the daemon's user";
  const reaped = manager.reaped ? `, killed ${manager.reaped.killedGroups.length} process groups left by a previous daemon` : "";
  return `${access}; commands run as ${user}; fork cap: ${manager.launcher.forkLimit(options.runAs?.uid)}${reaped}`;
}

main().catch((error: unknown) => {
  process.stderr.write(`sandboxd: ${(error as Error).message}\n`);
  process.exit(1);
});
