#!/usr/bin/env node
// The one-file daemon: dist/one-file/sandboxd, one executable with Node, the daemon and its native
// parts inside, to COPY into an image or scp onto a machine with nothing else on it.
//   1. esbuild bundles src/cli/one-file.ts and every dependency into one CommonJS script
//      (a single executable application runs CommonJS only);
//   2. node --experimental-sea-config writes the script, a V8 code cache and the native files
//      (build/sandboxd-exec, build/sandboxd.node, as assets) into a blob;
//   3. postject injects the blob into a copy of a Node binary: this one's, or --node <path>.
// Needs the dev dependencies and the native build (npm ci). Usage: node scripts/build-one-file.mjs [--node <path>] [--out <file>]
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { build, transform } from "esbuild";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { values } = parseArgs({ options: { node: { type: "string" }, out: { type: "string" } } });
const nodeBinary = values.node ?? process.execPath;
const out = path.resolve(values.out ?? path.join(root, "dist/one-file/sandboxd"));
// Beside the output, so two builds to different places do not share it.
const work = path.join(path.dirname(out), "work");
mkdirSync(work, { recursive: true });
for (const file of ["build/sandboxd-exec", "build/sandboxd.node"]) {
  if (!existsSync(path.join(root, file)))
    throw new Error(`${file} is missing: the native build (npm ci, needs a C compiler) comes first`);
}
const { version } = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));

// pino-pretty is loaded with createRequire where node_modules exist; here it must be in the bundle.
const bundledPrettyStream = {
  name: "bundled-pretty-stream",
  setup(plugin) {
    plugin.onLoad({ filter: /src[\\/]server[\\/]pretty-stream\.ts$/ }, (args) => ({
      loader: "ts",
      // The module's own options (prettyLines), with a static import of pino-pretty.
      contents: readFileSync(args.path, "utf8")
        .replace(/^import \{ createRequire \} from "node:module";$/m, 'import pinoPretty from "pino-pretty";')
        .replace(/const pinoPretty = createRequire\(import\.meta\.url\)\("pino-pretty"\)[^;]*;/, ""),
    }));
  },
};

const script = path.join(work, "sandboxd.cjs");
await build({
  entryPoints: [path.join(root, "src/cli/one-file.ts")],
  outfile: script,
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  // node-pty is not needed: the addon opens terminals. It stays out of the bundle (native, optional).
  external: ["node-pty"],
  define: { "import.meta.url": "__sandboxdModuleUrl", __SANDBOXD_VERSION__: JSON.stringify(version) },
  // In a single executable application __filename is the executable's path.
  banner: { js: 'var __sandboxdModuleUrl = require("node:url").pathToFileURL(__filename).href;' },
  plugins: [bundledPrettyStream],
  legalComments: "none",
  logLevel: "warning",
});

// The daemon's V8 flags, from the module the daemon itself reads them from (it imports nothing).
const flagsSource = await transform(readFileSync(path.join(root, "src/cli/sandboxd/node-flags.ts"), "utf8"), {
  loader: "ts",
  format: "esm",
});
const { daemonNodeFlags } = await import(`data:text/javascript,${encodeURIComponent(flagsSource.code)}`);

const blob = path.join(work, "sandboxd.blob");
const config = path.join(work, "sea-config.json");
writeFileSync(
  config,
  JSON.stringify({
    main: script,
    output: blob,
    disableExperimentalSEAWarning: true,
    useCodeCache: true,
    // The daemon's V8 flags (src/cli/sandboxd/node-flags.ts), applied by Node 24.6 and later; older ones ignore it.
    execArgv: daemonNodeFlags,
    assets: {
      "sandboxd-exec": path.join(root, "build/sandboxd-exec"),
      "sandboxd.node": path.join(root, "build/sandboxd.node"),
    },
  }),
);
// Node's own "Wrote single executable preparation blob" line says nothing the last line does not.
const prepared = spawnSync(nodeBinary, ["--experimental-sea-config", config], {
  stdio: ["ignore", "pipe", "pipe"],
  encoding: "utf8",
});
passOn(`${prepared.stdout}${prepared.stderr}`, /^Wrote single executable preparation blob to /);
if (prepared.status !== 0)
  throw new Error(`node --experimental-sea-config failed (${prepared.status ?? prepared.signal})`);
mkdirSync(path.dirname(out), { recursive: true });
copyFileSync(nodeBinary, out);
chmodSync(out, 0o755);
const injected = spawnSync(
  process.execPath,
  [
    path.join(root, "node_modules/postject/dist/cli.js"),
    out,
    "NODE_SEA_BLOB",
    blob,
    "--sentinel-fuse",
    "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2",
  ],
  { stdio: ["ignore", "ignore", "pipe"], encoding: "utf8" },
);
// postject's ELF reader (LIEF) warns once per note section of Node's binary whose name it cannot look up
// ("Can't find string offset for section name '.note.100'"): it injects correctly all the same (the
// package suite runs the result). Those lines are dropped; anything else postject says is passed on.
passOn(injected.stderr, /^warning: Can't find string offset for section name '\.note[\w.]*'$/);
if (injected.status !== 0) throw new Error(`postject failed (${injected.status ?? injected.signal})`);
console.log(
  `sandboxd: wrote ${path.relative(process.cwd(), out)} (${Math.round(readFileSync(out).length / 1048576)} MiB, Node ${execFileSync(nodeBinary, ["--version"]).toString().trim()})`,
);

/** Writes `text` to stderr but for the lines `expected` matches (and empty ones). */
function passOn(text, expected) {
  const said = text.split("\n").filter((line) => line !== "" && !expected.test(line));
  if (said.length > 0) process.stderr.write(`${said.join("\n")}\n`);
}
