/**
 * A sandboxd server as an OS process of its own, started with `startServer` options the CLI has no
 * flags for (timeouts shortened or lengthened for a test). Run as
 * `node --import tsx test/support/server-process.ts` with the options as JSON in
 * `SANDBOXD_TEST_SERVER_OPTIONS` (TLS material as file paths: `tlsFiles: {cert, key}`); it logs
 * `listening on <url>` to stderr, as the daemon does, and closes on SIGTERM. Other arguments
 * (`--port 0` from `startDaemonProcess`) are ignored: it always takes a free port.
 */
import { readFileSync } from "node:fs";
import { startServer, type SandboxServerOptions } from "../../src/server/index.js";

const { tlsFiles, ...options } = JSON.parse(
  process.env.SANDBOXD_TEST_SERVER_OPTIONS ?? "{}",
) as SandboxServerOptions & { tlsFiles?: { cert: string; key: string } };
const server = await startServer({
  ...options,
  port: 0,
  tls: tlsFiles === undefined ? undefined : { cert: readFileSync(tlsFiles.cert), key: readFileSync(tlsFiles.key) },
});
process.stderr.write(`listening on ${server.url}\n`);
process.once("SIGTERM", () => void server.close().then(() => process.exit(0)));
