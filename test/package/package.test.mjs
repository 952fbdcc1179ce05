// The packed package, installed the way users install it, in fresh directories outside the repository.
// Run by test/side/package.sh, which packs the tarball and provides a second Node LTS and the one-file
// daemon through SANDBOXD_TARBALL, SANDBOXD_NODE_LTS, SANDBOXD_ONE_FILE and SANDBOXD_PACKAGE_WORK.
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";

const tarball = process.env.SANDBOXD_TARBALL;
const nodeLts = process.env.SANDBOXD_NODE_LTS;
const oneFile = process.env.SANDBOXD_ONE_FILE;
const work = process.env.SANDBOXD_PACKAGE_WORK;
if (!tarball || !nodeLts || !oneFile || !work) throw new Error("run through test/side/package.sh");
const { version } = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));

/** Runs a program to its end; returns its stdout, throws with its stderr on a non-zero exit. */
function run(file, args, options = {}) {
  return execFileSync(file, args, {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    timeout: 300_000,
    ...options,
  });
}

/**
 * A fresh npm project in `work` with the tarball installed by `npm install <extra flags> <tarball>`; its
 * package.json lets sandboxd's install script build the native parts, as the README tells users (npm 11
 * warns about, and later npm versions skip, the install scripts of dependencies it does not list).
 */
function project(name, flags = []) {
  const directory = path.join(work, name);
  mkdirSync(directory);
  writeFileSync(
    path.join(directory, "package.json"),
    JSON.stringify({ name, private: true, type: "module", allowScripts: { sandboxd: true } }),
  );
  run("npm", ["install", "--no-audit", "--no-fund", "--silent", ...flags, tarball], { cwd: directory });
  return directory;
}

/** Starts a daemon program and resolves with its outermost process and URL once it listens. */
async function startDaemon(file, args, options = {}) {
  const child = spawn(file, [...args, "--port", "0", "--log-format", "json"], {
    stdio: ["ignore", "ignore", "pipe"],
    ...options,
  });
  let stderr = "";
  child.stderr.on("data", (data) => (stderr += data));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + 30_000;
  for (;;) {
    const url = /listening on (\S+)/.exec(stderr)?.[1];
    if (url) return { child, url, exited, stderr: () => stderr };
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`the daemon did not listen:\n${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The pids of processes whose command line contains `marker`. */
function processesWith(marker) {
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        // Arguments are NUL-separated: a shell line the daemon execs directly is `sleep\0<n>`, not `sh -c ...`.
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").includes(marker);
      } catch {
        return false;
      }
    });
}

async function waitUntil(check, what, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A plain ES module that uses the installed client: an exec, a PTY exec, a background process. */
const clientModule = `
import { connect } from "sandboxd/client";
const sandbox = await connect({ baseUrl: process.argv[2] });
const result = await sandbox.exec("printf '%s' \\"$GREETING\\"; echo; echo oops >&2; exit 3", { env: { GREETING: "hello from the package" } });
const terminal = await sandbox.exec("stty size", { pty: { cols: 91, rows: 17 } });
const background = await sandbox.startProcess("sleep " + process.argv[3]);
console.log(JSON.stringify({ stdout: result.stdout, stderr: result.stderr, exitCode: result.exitCode, terminal: terminal.stdout, node: process.version, pid: background.pid }));
// The background process outlives this client: the daemon's shutdown is what must end it.
await sandbox.close({ killProcesses: false });
`;

describe("the packed package", () => {
  const cleanups = [];
  after(() => cleanups.reverse().forEach((cleanup) => cleanup()));

  it("holds the build, the native sources and the contract, and no tests, benchmarks or source maps", () => {
    const files = run("tar", ["-tzf", tarball]).trim().split("\n");
    const allowed = [
      /^package\/dist\/(src|gen)\//,
      /^package\/native\//,
      /^package\/scripts\/build-native\.mjs$/,
      /^package\/proto\/(sandbox|process)\//,
      /^package\/(package\.json|README\.md|LICENSE)$/,
    ];
    assert.deepEqual(
      files.filter((file) => !allowed.some((pattern) => pattern.test(file))),
      [],
    );
    assert.equal(files.filter((file) => file.endsWith(".map")).length, 0);
    for (const entry of ["client/index", "server/index", "cli/sandboxd"]) {
      assert.ok(files.includes(`package/dist/src/${entry}.js`), entry);
      assert.ok(files.includes(`package/dist/src/${entry}.d.ts`), entry);
    }
    console.log(
      `${files.length} files in ${path.basename(tarball)} (${Math.round(readFileSync(tarball).length / 1024)} KiB)`,
    );
  });

  describe("installed as a dependency (npm install <tarball>)", () => {
    let directory;
    let daemon;
    before(async () => {
      directory = project("consumer");
      // npx: npm, a shell, then node; the outermost pid is what a supervisor signals.
      daemon = await startDaemon("npx", ["--no-install", "sandboxd", "--workspace", directory], { cwd: directory });
      cleanups.push(() => daemon.child.kill("SIGKILL"));
    });

    it("does not install node-pty: a client-only user needs no native terminal module", () => {
      assert.equal(existsSync(path.join(directory, "node_modules/node-pty")), false);
      assert.equal(
        existsSync(path.join(directory, "node_modules/sandboxd/build/sandboxd-exec")),
        true,
        "the helper is built at install",
      );
    });

    it("npx sandboxd --version prints the version", () => {
      assert.equal(run("npx", ["--no-install", "sandboxd", "--version"], { cwd: directory }), `sandboxd ${version}\n`);
    });

    it("npx sandbox (the CLI) runs a command through the daemon and exits with its code", () => {
      assert.equal(run("npx", ["--no-install", "sandbox", "--version"], { cwd: directory }), `${version}\n`);
      let failure;
      try {
        run("npx", ["--no-install", "sandbox", "exec", "--url", daemon.url, "--", "echo from the cli; exit 4"], {
          cwd: directory,
        });
      } catch (error) {
        failure = error;
      }
      assert.equal(failure?.status, 4);
      assert.equal(failure?.stdout, "from the cli\n");
    });

    for (const [label, node] of [
      [`Node ${process.version}`, process.execPath],
      [`Node ${run(nodeLts, ["--version"]).trim()} (another LTS)`, nodeLts],
    ]) {
      it(`a plain .mjs importing sandboxd/client runs commands, on ${label}`, async () => {
        writeFileSync(path.join(directory, "client.mjs"), clientModule);
        const marker = `${Math.floor(Math.random() * 1e9) + 1e9}`;
        const output = JSON.parse(run(node, ["client.mjs", daemon.url, marker], { cwd: directory }));
        assert.deepEqual(
          { stdout: output.stdout, stderr: output.stderr, exitCode: output.exitCode, terminal: output.terminal },
          { stdout: "hello from the package\n", stderr: "oops\n", exitCode: 3, terminal: "17 91\r\n" },
        );
        assert.equal(output.node, run(node, ["--version"]).trim());
        // One background command (its shell line carries the marker); a process still starting or
        // leaving may show for a moment on a loaded machine, a second command would stay.
        await waitUntil(() => processesWith(`sleep ${marker}`).length === 1, "exactly one background command", 5000);
      });
    }

    it("a .ts consumer compiles with tsc --strict, exactOptionalPropertyTypes and noUncheckedIndexedAccess, and runs", async () => {
      run(
        "npm",
        ["install", "--no-audit", "--no-fund", "--silent", "--save-exact", "typescript@5.9.3", "@types/node@24.19.2"],
        { cwd: directory },
      );
      writeFileSync(
        path.join(directory, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            target: "ES2022",
            module: "NodeNext",
            moduleResolution: "NodeNext",
            strict: true,
            exactOptionalPropertyTypes: true,
            noUncheckedIndexedAccess: true,
            skipLibCheck: false,
            types: ["node"],
          },
          files: ["consumer.ts"],
        }),
      );
      writeFileSync(
        path.join(directory, "consumer.ts"),
        `import { connect, ProcessNotFoundError, type ExecResult } from "sandboxd/client";
import { SandboxService } from "sandboxd/gen";
import type { SandboxServerOptions } from "sandboxd/server";

const options: SandboxServerOptions = { port: 0 };
const sandbox = await connect({ baseUrl: process.argv[2] ?? "" });
const result: ExecResult = await sandbox.exec("echo typed", { timeout: 5_000 });
const handle = await sandbox.startProcess("echo background");
const finished = await handle.wait();
let notFound = "";
try {
  await sandbox.killProcess("no-such-process");
} catch (error) {
  if (error instanceof ProcessNotFoundError) notFound = error.name;
}
console.log(JSON.stringify({ stdout: result.stdout, exitCode: finished.exitCode, notFound, service: SandboxService.typeName, port: options.port }));
await sandbox.close();
`,
      );
      run("npx", ["--no-install", "tsc", "-p", "."], { cwd: directory });
      const output = JSON.parse(run(process.execPath, ["consumer.js", daemon.url], { cwd: directory }));
      assert.deepEqual(output, {
        stdout: "typed\n",
        exitCode: 0,
        notFound: "ProcessNotFoundError",
        service: "sandbox.v1.SandboxService",
        port: 0,
      });
    });

    it("SIGTERM to the npx pid stops the daemon and every command it started", async () => {
      const marker = `${Math.floor(Math.random() * 1e9) + 1e9}`;
      run(process.execPath, ["client.mjs", daemon.url, marker], { cwd: directory });
      await waitUntil(() => processesWith(`sleep ${marker}`).length === 1, "the background command");
      daemon.child.kill("SIGTERM");
      await daemon.exited;
      await waitUntil(() => processesWith(`sleep ${marker}`).length === 0, "the commands to be killed");
      await assert.rejects(fetch(new URL("/healthz", daemon.url)));
    });
  });

  it("installed with --omit=dev, the daemon starts and answers health; a terminal without addon or node-pty is a clear error", async () => {
    const directory = project("daemon-only", ["--omit=dev"]);
    const daemon = await startDaemon(path.join(directory, "node_modules/.bin/sandboxd"), ["--workspace", directory], {
      cwd: directory,
    });
    cleanups.push(() => daemon.child.kill("SIGKILL"));
    const health = await fetch(new URL("/healthz", daemon.url));
    assert.equal(health.status, 200);
    assert.equal(health.headers.get("sandboxd-version"), version);
    daemon.child.kill("SIGTERM");
    await daemon.exited;

    const withoutAddon = await startDaemon(
      path.join(directory, "node_modules/.bin/sandboxd"),
      ["--workspace", directory],
      {
        cwd: directory,
        env: { ...process.env, SANDBOXD_NO_ADDON: "1" },
      },
    );
    cleanups.push(() => withoutAddon.child.kill("SIGKILL"));
    writeFileSync(
      path.join(directory, "pty.mjs"),
      `import { createClient, SandboxService } from "sandboxd/client";
import { createConnectTransport } from "@connectrpc/connect-node";
const rpc = createClient(SandboxService, createConnectTransport({ baseUrl: process.argv[2], httpVersion: "1.1" }));
const plain = await rpc.exec({ spec: { command: "echo plain" } });
const chunks = [];
for await (const event of plain) if (event.event.case === "output") chunks.push(Buffer.from(event.event.value.data).toString());
const terminal = await rpc.startProcess({ spec: { command: "tty", pty: {} } });
console.log(JSON.stringify({ plain: chunks.join(""), status: terminal.process.exit?.status, error: terminal.process.exit?.error }));`,
    );
    const output = JSON.parse(run(process.execPath, ["pty.mjs", withoutAddon.url], { cwd: directory }));
    assert.equal(output.plain, "plain\n");
    // A start that fails is a record with status error and why, as for a program that is not found.
    assert.equal(output.status, 6);
    assert.match(output.error, /terminal commands need the native addon .*, which is not loaded/);
    withoutAddon.child.kill("SIGTERM");
    await withoutAddon.exited;
  });

  it("the one-file daemon runs alone in an empty directory: exec and a PTY command, then SIGTERM cleans up", async () => {
    const directory = path.join(work, "one-file-alone");
    mkdirSync(directory);
    const binary = path.join(directory, "sandboxd");
    copyFileSync(oneFile, binary);
    execFileSync("chmod", ["755", binary]);
    assert.deepEqual(readdirSync(directory), ["sandboxd"]);
    assert.equal(
      run(binary, ["--version"], { cwd: directory, env: { PATH: "/usr/bin:/bin" } }),
      `sandboxd ${version}\n`,
    );
    const unpackRoot = path.join(work, "unpack");
    mkdirSync(unpackRoot);
    // What a daemon killed with SIGKILL leaves (no exit handler ran): removed at the next start.
    const stale = path.join(unpackRoot, "sandboxd-2147483-AbC123");
    mkdirSync(stale);
    writeFileSync(path.join(stale, "sandboxd-exec"), "left behind");
    // No node_modules, no NODE_PATH, not even node on PATH.
    const daemon = await startDaemon(binary, ["--workspace", directory], {
      cwd: directory,
      env: { PATH: "/usr/bin:/bin", SANDBOXD_UNPACK_DIR: unpackRoot },
    });
    cleanups.push(() => daemon.child.kill("SIGKILL"));
    assert.doesNotMatch(daemon.stderr(), /WARNING/, "the helper and the addon are found");
    assert.equal(readdirSync(unpackRoot).length, 1, "the stale directory is gone, this daemon's is there");
    assert.match(readdirSync(unpackRoot)[0], new RegExp(`^sandboxd-${daemon.child.pid}-`));
    const marker = `${Math.floor(Math.random() * 1e9) + 1e9}`;
    const output = JSON.parse(
      run(process.execPath, ["client.mjs", daemon.url, marker], { cwd: path.join(work, "consumer") }),
    );
    assert.deepEqual(
      { stdout: output.stdout, exitCode: output.exitCode, terminal: output.terminal },
      { stdout: "hello from the package\n", exitCode: 3, terminal: "17 91\r\n" },
    );
    daemon.child.kill("SIGTERM");
    assert.deepEqual(await daemon.exited, { code: 0, signal: null });
    await waitUntil(() => processesWith(`sleep ${marker}`).length === 0, "the commands to be killed");
    assert.deepEqual(readdirSync(unpackRoot), [], "the unpacked native files are removed at exit");
    // An unpack directory other users may rename entries in: the daemon would run a helper they swapped in.
    const shared = path.join(work, "unpack-shared");
    mkdirSync(shared);
    chmodSync(shared, 0o777);
    const refused = spawnSync(binary, ["--port", "0", "--workspace", directory], {
      cwd: directory,
      env: { PATH: "/usr/bin:/bin", SANDBOXD_UNPACK_DIR: shared },
      encoding: "utf8",
      timeout: 30_000,
    });
    assert.equal(refused.status, 1, refused.stderr);
    assert.match(
      refused.stderr,
      /^sandboxd: unpack directory .*unpack-shared \(SANDBOXD_UNPACK_DIR\): .*unpack-shared has mode 0777: other users could swap/m,
    );
    assert.deepEqual(readdirSync(shared), [], "nothing unpacked there");
  });
});
