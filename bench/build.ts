import path from "node:path";
import { build } from "esbuild";
import { repoRoot } from "./daemon.js";

/** Where {@link buildDaemon} writes the bundled daemon (ignored by git, inside the repo so node-pty resolves). */
export const bundleFile = path.join(repoRoot, "bench/.tools/bundle/sandboxd.mjs");

/**
 * Bundles `src/cli/sandboxd.ts` and its dependencies into one ES module with esbuild and returns its
 * path: the daemon as one would ship it, without a TypeScript loader in its start time or memory.
 * One file instead of some two hundred modules roughly halves the start time, since Node 20's ESM
 * loader spends most of a start resolving and reading files. node-pty stays external (native).
 */
export async function buildDaemon(): Promise<string> {
  return bundle(path.join(repoRoot, "src/cli/sandboxd.ts"), bundleFile);
}

/** Where {@link buildFloorServer} writes the bundled floor server. */
export const floorBundleFile = path.join(repoRoot, "bench/.tools/bundle/floor-server.mjs");

/** Bundles bench/floor-server.ts the way {@link buildDaemon} bundles the daemon, so the two compare. */
export async function buildFloorServer(): Promise<string> {
  return bundle(path.join(repoRoot, "bench/floor-server.ts"), floorBundleFile);
}

/** Where {@link buildClientStream} writes the bundled client process of the client-memory figure. */
export const clientBundleFile = path.join(repoRoot, "bench/.tools/bundle/client-stream.mjs");

/** Bundles bench/client-stream.ts (the TypeScript SDK as a process of its own), as the daemon is bundled. */
export async function buildClientStream(): Promise<string> {
  return bundle(path.join(repoRoot, "bench/client-stream.ts"), clientBundleFile);
}

/** Where {@link buildFileTransferTools} writes the file-transfer floor server and client. */
export const fileToolBundleFiles = {
  floorServer: path.join(repoRoot, "bench/.tools/bundle/file-floor-server.mjs"),
  transferClient: path.join(repoRoot, "bench/.tools/bundle/file-transfer-client.mjs"),
};

/** Bundles bench/file-floor-server.ts and bench/file-transfer-client.ts, as the daemon is bundled. */
export async function buildFileTransferTools(): Promise<typeof fileToolBundleFiles> {
  await bundle(path.join(repoRoot, "bench/file-floor-server.ts"), fileToolBundleFiles.floorServer);
  await bundle(path.join(repoRoot, "bench/file-transfer-client.ts"), fileToolBundleFiles.transferClient);
  return fileToolBundleFiles;
}

async function bundle(entry: string, outfile: string): Promise<string> {
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: ["node-pty"],
    // node-pty is CommonJS and loaded with require(); ES modules have none of their own.
    banner: {
      js: "import { createRequire as __sandboxdCreateRequire } from 'node:module'; const require = __sandboxdCreateRequire(import.meta.url);",
    },
    logLevel: "warning",
  });
  return outfile;
}
