import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  canTransition,
  connect,
  type ProcessHandle,
  Sandbox,
  SandboxError,
  sandboxTransitions,
  type SandboxStatus,
} from "../src/client/index.js";
import { waitFor } from "./support/processes.js";
import { sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { startTcpProxy, type TcpProxy } from "./support/tcp-proxy.js";

let t: TestServer;
let proxy: TcpProxy;
beforeAll(async () => {
  t = await startTestServer();
  proxy = await startTcpProxy({ host: "127.0.0.1", port: t.server.port });
});
afterAll(async () => {
  await proxy.close();
  await t.close();
});

const statuses: SandboxStatus[] = ["init", "running", "idle", "error", "closed"];

/** Seed 002's table of valid transitions, as written there. */
const seedTable: Record<SandboxStatus, SandboxStatus[]> = {
  init: ["running", "closed"],
  running: ["idle", "error", "closed"],
  idle: ["running", "error", "closed"],
  error: ["running", "closed"],
  closed: [],
};

describe("lifecycle (seed 002)", () => {
  it("allows exactly seed 002's transitions", () => {
    for (const from of statuses) {
      for (const to of statuses) expect(canTransition(from, to), `${from} -> ${to}`).toBe(seedTable[from].includes(to));
    }
    expect(sandboxTransitions).toEqual(seedTable);
  });

  it("runs the seed's example: start, run, stop, cleanup; describe() tells the state", async () => {
    const sandbox = new Sandbox({ baseUrl: t.server.url, workspace: [t.workspace], timeoutMs: 60_000 });
    expect(sandbox.status).toBe("init");
    expect(sandbox.sandboxId).toMatch(/^[0-9a-f]{12}$/);
    await expect(sandbox.exec("echo too early")).rejects.toMatchObject({ code: "NOT_RUNNING" });
    await sandbox.start();
    expect(sandbox.status).toBe("running");
    const result = await sandbox.exec("echo value");
    expect(result.stdout).toBe("value\n");
    expect(sandbox.describe()).toEqual({
      sandboxId: sandbox.sandboxId,
      status: "running",
      workspace: [t.workspace],
      // In seconds, as the Orbiter sandbox's describe() reports it.
      timeout: 60,
      sessionId: sandbox.sandboxId,
      baseUrl: t.server.url,
      protocol: "grpc",
    });
    const workspace = sandbox.workspace;
    workspace.push("/elsewhere");
    expect(sandbox.workspace).toEqual([t.workspace]);
    await sandbox.stop();
    expect(sandbox.status).toBe("idle");
    await expect(sandbox.exec("echo stopped")).rejects.toMatchObject({ code: "NOT_RUNNING" });
    await sandbox.cleanup();
    expect(sandbox.status).toBe("closed");
  });

  it("refuses a `timeout` option, whose unit would be ambiguous", () => {
    expect(() => new Sandbox({ baseUrl: t.server.url, timeout: 60 } as never)).toThrow(
      expect.objectContaining({ code: "INVALID_ARGUMENT" }),
    );
  });

  it("refuses invalid transitions with SandboxError and keeps the state", async () => {
    const sandbox = new Sandbox({ baseUrl: t.server.url });
    await expect(sandbox.stop()).rejects.toMatchObject({ name: "SandboxError", code: "INVALID_TRANSITION" });
    expect(sandbox.status).toBe("init");
    await sandbox.start();
    await expect(sandbox.start()).rejects.toMatchObject({ code: "INVALID_TRANSITION" });
    expect(sandbox.status).toBe("running");
    await sandbox.stop();
    await expect(sandbox.stop()).rejects.toMatchObject({ code: "INVALID_TRANSITION" });
    await sandbox.close();
    await expect(sandbox.start()).rejects.toBeInstanceOf(SandboxError);
    await sandbox.close();
    expect(sandbox.status).toBe("closed");
  });

  it("init goes straight to closed", async () => {
    const sandbox = new Sandbox({ baseUrl: t.server.url });
    await sandbox.close();
    expect(sandbox.status).toBe("closed");
  });

  it("stop kills the sandbox's processes, and start follows", async () => {
    const sandbox = await connect({ baseUrl: t.server.url });
    const marker = sleepMarker();
    await sandbox.startProcess(`sleep ${marker}`);
    await sandbox.startProcess(`sleep ${marker}`, { sessionId: "other-session-of-this-sandbox" });
    await waitFor(() => sleepers(marker).length === 2, { what: "two sleeps" });
    await sandbox.stop();
    await waitFor(() => sleepers(marker).length === 0, { what: "stop to kill them" });
    await sandbox.start();
    expect((await sandbox.exec("echo again")).stdout).toBe("again\n");
    await sandbox.close();
  });

  it("goes idle -> error when the daemon cannot be reached, then error -> running once it can", async () => {
    const sandbox = await connect({ baseUrl: proxy.url, connectTimeoutMs: 2000 });
    await sandbox.stop();
    proxy.refuse(true);
    await expect(sandbox.start()).rejects.toMatchObject({ code: "UNAVAILABLE" });
    expect(sandbox.status).toBe("error");
    proxy.refuse(false);
    await sandbox.start();
    expect(sandbox.status).toBe("running");
    await sandbox.close();
  });

  it("goes running -> error when a call cannot reach the daemon", async () => {
    const sandbox = await connect({ baseUrl: proxy.url });
    proxy.refuse(true);
    proxy.cut();
    // A call racing the cut may die with the old connection first; the next ones cannot connect.
    const failures = new Set<string>();
    await waitFor(
      async () => {
        await sandbox.listProcesses().catch((error: SandboxError) => failures.add(error.code));
        return sandbox.status === "error";
      },
      { what: "the sandbox to go to error" },
    );
    expect(failures).toContain("UNAVAILABLE");
    await expect(sandbox.exec("true")).rejects.toMatchObject({ code: "NOT_RUNNING" });
    proxy.refuse(false);
    await sandbox.start();
    expect((await sandbox.exec("echo back")).stdout).toBe("back\n");
    await sandbox.close();
  });

  it("a failed first start stays init (seed 002 has no init -> error)", async () => {
    const sandbox = new Sandbox({ baseUrl: "http://127.0.0.1:1", connectTimeoutMs: 1000 });
    await expect(sandbox.start()).rejects.toBeInstanceOf(SandboxError);
    expect(sandbox.status).toBe("init");
    await sandbox.close();
  });

  it("await using closes the sandbox at the end of the scope; a background process (a dev server) runs on, a waiting call's command dies", async () => {
    const server = sleepMarker();
    const waiting = sleepMarker();
    let escaped: Sandbox | undefined;
    let process: ProcessHandle | undefined;
    let call: Promise<unknown> | undefined;
    {
      await using sandbox = await connect({ baseUrl: t.server.url });
      escaped = sandbox;
      process = await sandbox.startProcess(`sleep ${server}`);
      call = sandbox.exec(`sleep ${waiting}`).catch((error: unknown) => error);
      await waitFor(() => sleepers(server).length === 1 && sleepers(waiting).length === 1, { what: "both sleeps" });
    }
    expect(escaped.status).toBe("closed");
    await waitFor(() => sleepers(waiting).length === 0, { what: "the waiting call's command to die with its call" });
    expect(await call).toBeInstanceOf(SandboxError);
    expect(sleepers(server)).toHaveLength(1);
    t.server.manager.get(process.id).kill("SIGKILL", -1);
    await waitFor(() => sleepers(server).length === 0, { what: "the sleep to be gone" });
  });

  it("close({ killProcesses: true }) kills the sandbox's background processes first", async () => {
    const marker = sleepMarker();
    const sandbox = await connect({ baseUrl: t.server.url });
    await sandbox.startProcess(`sleep ${marker}`);
    await waitFor(() => sleepers(marker).length === 1, { what: "the sleep" });
    await sandbox.close({ killProcesses: true });
    await waitFor(() => sleepers(marker).length === 0, { what: "close to kill it" });
  });
});

describe("connection options", () => {
  it("sends the bearer token; a wrong or missing one is UNAUTHENTICATED at start", async () => {
    const secured = await startTestServer({ token: "s3cret-token" });
    try {
      await expect(connect({ baseUrl: secured.server.url })).rejects.toMatchObject({ code: "UNAUTHENTICATED" });
      await expect(connect({ baseUrl: secured.server.url, token: "wrong" })).rejects.toMatchObject({
        code: "UNAUTHENTICATED",
      });
      for (const protocol of ["grpc", "connect"] as const) {
        const sandbox = await connect({ baseUrl: secured.server.url, token: "s3cret-token", protocol });
        expect((await sandbox.exec("echo authorised")).stdout).toBe("authorised\n");
        const handle = await sandbox.startProcess("echo streamed");
        expect((await handle.wait()).stdout()).toBe("streamed\n");
        await sandbox.close();
      }
    } finally {
      await secured.close();
    }
  });

  it("exposes the generated client for raw RPCs", async () => {
    const sandbox = await connect({ baseUrl: t.server.url });
    const { processes } = await sandbox.client.listProcesses({ sessionId: sandbox.sessionId });
    expect(processes).toEqual([]);
    await sandbox.close();
    expect(() => sandbox.client).toThrow(SandboxError);
  });
});

describe("the client entry point", () => {
  const root = path.resolve(import.meta.dirname, "..");

  /** Relative imports of a TypeScript file, resolved to files. */
  function importsOf(file: string): { files: string[]; packages: string[] } {
    const source = readFileSync(file, "utf8");
    const specifiers = [...source.matchAll(/(?:import|export)\s[^;]*?from\s+"([^"]+)"|import\("([^"]+)"\)/g)].map(
      (match) => match[1] ?? match[2],
    );
    const files = specifiers
      .filter((spec) => spec.startsWith("."))
      .map((spec) => path.resolve(path.dirname(file), spec.replace(/\.js$/, ".ts")));
    return { files, packages: specifiers.filter((spec) => !spec.startsWith(".")) };
  }

  /** The shared leaves the client loads: abort plumbing, limits, error reasons, exit causes and process statuses (the last three from gen/). */
  const sharedModules = [
    "src/shared/abort.ts",
    "src/shared/error-reasons.ts",
    "src/shared/exit-cause.ts",
    "src/shared/limits.ts",
    "src/shared/process-status.ts",
  ];

  it("statically reaches neither src/server, nor src/process beyond its dependency-free modules, nor node-pty", () => {
    const seen = new Set<string>();
    const packages = new Set<string>();
    const queue = [path.join(root, "src/client/index.ts")];
    while (queue.length > 0) {
      const file = queue.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      const { files, packages: found } = importsOf(file);
      found.forEach((name) => packages.add(name));
      queue.push(...files);
    }
    const relative = [...seen].map((file) => path.relative(root, file));
    expect(relative.filter((file) => !file.startsWith("src/client/") && !file.startsWith("gen/")).sort()).toEqual(
      sharedModules,
    );
    for (const shared of sharedModules) {
      expect(
        importsOf(path.join(root, shared))
          .files.map((file) => path.relative(root, file))
          .filter((file) => !file.startsWith("gen/")),
      ).toEqual([]);
    }
    expect(
      [...packages].filter(
        (name) => !name.startsWith("node:") && !name.startsWith("@bufbuild/") && !name.startsWith("@connectrpc/"),
      ),
    ).toEqual([]);
  });

  it("loads in a fresh node process without loading server code, the process manager or node-pty", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "client-entry-"));
    try {
      writeFileSync(
        path.join(dir, "hooks.mjs"),
        `export async function resolve(specifier, context, next) {
           const result = await next(specifier, context);
           if (specifier === "node-pty" || /\\/src\\/(server|process)\\//.test(result.url)) throw new Error("forbidden load: " + result.url);
           return result;
         }`,
      );
      writeFileSync(
        path.join(dir, "register.mjs"),
        `import { register } from "node:module"; register("./hooks.mjs", import.meta.url);`,
      );
      const run = (entry: string) =>
        promisify(execFile)(
          process.execPath,
          [
            "--import",
            "tsx",
            "--import",
            path.join(dir, "register.mjs"),
            "--input-type=module",
            "-e",
            `const m = await import(${JSON.stringify(entry)}); console.log(Object.keys(m).length)`,
          ],
          { cwd: root },
        );
      const { stdout } = await run("sandboxd/client");
      expect(Number(stdout.trim())).toBeGreaterThan(10);
      // The same hook does catch server code, so the check above means something.
      await expect(run("sandboxd/server")).rejects.toThrow(/forbidden load/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
