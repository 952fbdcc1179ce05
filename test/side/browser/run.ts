// The browser test (test/side/browser.sh runs it): a real daemon started from the command line with
// --cors-origin, a page served from another origin whose script (page.ts, bundled with esbuild) calls the
// daemon with @connectrpc/connect-web over Connect and gRPC-Web, and headless Debian Chromium driven by
// playwright-core loading it. A second page on an origin the daemon does not allow must be refused.
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium } from "playwright-core";
import type { PageResult } from "./page.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
/** Chromium's flags on these machines: no sandbox as root, and no connections of its own to the closed network. */
const chromiumFlags = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Serves the page and its bundled script on a free loopback port. */
async function servePage(script: string): Promise<{ server: Server; port: number }> {
  const html =
    '<!doctype html><meta charset="utf-8"><title>sandboxd browser test</title><script type="module" src="/page.js"></script>';
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://page");
    if (url.pathname === "/") response.writeHead(200, { "content-type": "text/html" }).end(html);
    else if (url.pathname === "/favicon.ico") response.writeHead(204).end();
    else if (url.pathname === "/page.js") response.writeHead(200, { "content-type": "text/javascript" }).end(script);
    else response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

/** Starts `sandboxd` from its command line and resolves with its URL once it logs that it listens. */
async function startDaemon(args: string[], log: string[]): Promise<{ daemon: ChildProcess; url: string }> {
  const daemon = spawn(process.execPath, ["--import", "tsx", path.join(root, "src/cli/sandboxd.ts"), ...args], {
    cwd: root,
    stdio: ["ignore", "ignore", "pipe"],
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the daemon did not listen within 30 s:\n${log.join("")}`)),
      30_000,
    );
    daemon.once("exit", (code) => reject(new Error(`the daemon exited (${code}):\n${log.join("")}`)));
    let pending = "";
    daemon.stderr!.setEncoding("utf8").on("data", (text: string) => {
      log.push(text);
      pending += text;
      let newline;
      while ((newline = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        try {
          const record = JSON.parse(line) as { url?: string };
          if (record.url !== undefined) {
            clearTimeout(timer);
            resolve(record.url);
          }
        } catch {
          // Not a JSON line.
        }
      }
    });
  });
  return { daemon, url };
}

async function main(): Promise<number> {
  const work = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-browser-")));
  const workspace = path.join(work, "workspace");
  const tokenFile = path.join(work, "token");
  const token = `browser-${process.pid}-${Date.now()}`;
  writeFileSync(tokenFile, token);
  chmodSync(tokenFile, 0o600);
  mkdirSync(workspace);

  const bundle = await build({
    entryPoints: [path.join(root, "test/side/browser/page.ts")],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "chrome120",
    write: false,
    logLevel: "warning",
  });
  const page = await servePage(bundle.outputFiles[0].text);
  // The daemon allows the page's origin (localhost:port) and no other: 127.0.0.1:port is another origin.
  const allowedOrigin = `http://localhost:${page.port}`;
  const otherOrigin = `http://127.0.0.1:${page.port}`;
  const daemonLog: string[] = [];
  const { daemon, url } = await startDaemon(
    [
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--workspace",
      workspace,
      "--token-file",
      tokenFile,
      "--cors-origin",
      allowedOrigin,
      "--log-format",
      "json",
    ],
    daemonLog,
  );
  const results: PageResult[] = [];
  const browser = await chromium.launch({ executablePath: chromiumPath, args: chromiumFlags, timeout: 60_000 });
  try {
    const query = `?daemon=${encodeURIComponent(url)}&token=${encodeURIComponent(token)}`;
    for (const [origin, expect] of [
      [allowedOrigin, "allowed"],
      [otherOrigin, "blocked"],
    ] as const) {
      const context = await browser.newContext();
      const tab = await context.newPage();
      tab.on("console", (message) => console.log(`  [${origin} console.${message.type()}] ${message.text()}`));
      tab.on("pageerror", (error) => console.log(`  [${origin} page error] ${error.message}`));
      tab.setDefaultTimeout(60_000);
      await tab.goto(`${origin}/${query}&mode=${expect}`);
      await tab.waitForFunction(() => (globalThis as { sandboxdResults?: unknown }).sandboxdResults !== undefined);
      const pageResults = await tab.evaluate(
        () => (globalThis as unknown as { sandboxdResults: Promise<PageResult[]> }).sandboxdResults,
      );
      results.push(
        ...pageResults.map((result) => ({ ...result, name: `page on ${expect} origin ${origin}: ${result.name}` })),
      );
      await context.close();
    }
  } finally {
    await browser.close();
    page.server.close();
    daemon.kill("SIGTERM");
    await new Promise((resolve) => (daemon.exitCode !== null ? resolve(null) : daemon.once("exit", resolve)));
    rmSync(work, { recursive: true, force: true });
  }

  const failed = results.filter((result) => !result.ok);
  for (const result of results)
    console.log(`${result.ok ? "ok" : "FAILED"} - ${result.name}${result.ok ? "" : `: ${result.detail}`}`);
  if (failed.length > 0) console.log(`daemon log:\n${daemonLog.join("")}`);
  console.log(`${results.length - failed.length} passed, ${failed.length} failed`);
  return results.length >= 10 && failed.length === 0 ? 0 : 1;
}

main().then(
  (status) => process.exit(status),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
