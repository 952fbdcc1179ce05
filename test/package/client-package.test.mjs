// The client's own package (packages/client), installed alone as a client-only user installs it, beside the full
// package installed for production: what each brings into node_modules, and the client talking to the daemon.
// Run by test/side/package.sh, which packs both tarballs (SANDBOXD_CLIENT_TARBALL, SANDBOXD_TARBALL).
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";

const clientTarball = process.env.SANDBOXD_CLIENT_TARBALL;
const tarball = process.env.SANDBOXD_TARBALL;
const work = process.env.SANDBOXD_PACKAGE_WORK;
if (!clientTarball || !tarball || !work) throw new Error("run through test/side/package.sh");

function run(file, args, options = {}) {
  return execFileSync(file, args, {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    timeout: 300_000,
    ...options,
  });
}

/** A fresh npm project with `tarball` installed by `npm install <flags> <tarball>`. */
function project(name, source, flags = []) {
  const directory = path.join(work, name);
  mkdirSync(directory);
  writeFileSync(
    path.join(directory, "package.json"),
    JSON.stringify({ name, private: true, type: "module", allowScripts: { sandboxd: true } }),
  );
  run("npm", ["install", "--no-audit", "--no-fund", "--silent", ...flags, source], { cwd: directory });
  return directory;
}

/** The packages in a project's node_modules (scoped ones as `@scope/name`). */
function installed(directory) {
  const modules = path.join(directory, "node_modules");
  return readdirSync(modules)
    .filter((name) => !name.startsWith("."))
    .flatMap((name) =>
      name.startsWith("@") ? readdirSync(path.join(modules, name)).map((inner) => `${name}/${inner}`) : [name],
    )
    .sort();
}

/** Bytes on disk of a project's node_modules (du's apparent size, in KiB). */
function installKiB(directory) {
  return Number(run("du", ["-sk", "--apparent-size", path.join(directory, "node_modules")]).split("\t")[0]);
}

describe("the client package", () => {
  let clientOnly;
  let full;
  let daemon;
  before(async () => {
    clientOnly = project("client-only", clientTarball);
    full = project("daemon-production", tarball, ["--omit=dev"]);
    daemon = spawn("npx", ["--no-install", "sandboxd", "--port", "0", "--workspace", full], {
      cwd: full,
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    daemon.stderr.on("data", (data) => (stderr += data));
    const deadline = Date.now() + 30_000;
    while (!/listening on (\S+)/.test(stderr)) {
      if (daemon.exitCode !== null || Date.now() > deadline) throw new Error(`the daemon did not listen:\n${stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    daemon.url = /listening on (\S+)/.exec(stderr)[1];
  });
  after(() => daemon?.kill("SIGTERM"));

  it("holds the client and the generated messages, and nothing of the daemon", () => {
    const files = run("tar", ["-tzf", clientTarball]).trim().split("\n");
    assert.deepEqual(
      files.filter((file) => /^package\/dist\/src\/(process|server|cli|files)\//.test(file)),
      [],
    );
    assert.ok(files.includes("package/dist/src/client/index.js"));
    assert.ok(files.includes("package/dist/src/client/index.d.ts"));
  });

  it("installs connect-es and protobuf-es alone; each install's size is measured", () => {
    assert.deepEqual(installed(clientOnly), [
      "@bufbuild/protobuf",
      "@connectrpc/connect",
      "@connectrpc/connect-node",
      "sandboxd-client",
    ]);
    const sizes = { "sandboxd-client": installKiB(clientOnly), "sandboxd --omit=dev": installKiB(full) };
    console.log(`install size (node_modules, KiB): ${JSON.stringify(sizes)}`);
    for (const name of ["commander", "pino", "pino-pretty", "prom-client", "node-api-headers", "node-pty"]) {
      assert.ok(!installed(clientOnly).includes(name), name);
    }
    assert.ok(sizes["sandboxd-client"] < sizes["sandboxd --omit=dev"]);
    // A budget, so that a dependency slipping into the client shows: 3.8 MiB when it was set (the daemon's: 11.2).
    assert.ok(
      sizes["sandboxd-client"] <= 5 * 1024,
      `sandboxd-client installs ${sizes["sandboxd-client"]} KiB, over 5 MiB`,
    );
  });

  it("runs commands on the daemon from a plain .mjs", () => {
    writeFileSync(
      path.join(clientOnly, "client.mjs"),
      `import { connect } from "sandboxd-client";
const sandbox = await connect({ baseUrl: process.argv[2] });
const result = await sandbox.exec("echo from the client package; exit 5");
console.log(JSON.stringify({ stdout: result.stdout, exitCode: result.exitCode }));
await sandbox.close();
`,
    );
    assert.deepEqual(JSON.parse(run(process.execPath, ["client.mjs", daemon.url], { cwd: clientOnly })), {
      stdout: "from the client package\n",
      exitCode: 5,
    });
  });
});
