import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** Set by the one-file build (esbuild `define`), where there is no package.json beside the code. */
declare const __SANDBOXD_VERSION__: string | undefined;

/**
 * The version of sandboxd, from its package.json: the daemon's `--version`, `GET /healthz`, the
 * `sandboxd_build_info` metric and the CLI's `--version` report it. Imports nothing of the project,
 * so the client may use it as well as the server.
 */
export const sandboxdVersion: string =
  typeof __SANDBOXD_VERSION__ === "string" ? __SANDBOXD_VERSION__ : readPackageVersion();

/** Walks up from this module (src/ in a checkout, dist/src/ in the package) to sandboxd's package.json. */
function readPackageVersion(): string {
  let directory = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const manifest = JSON.parse(readFileSync(path.join(directory, "package.json"), "utf8")) as {
        name?: string;
        version?: string;
      };
      if (manifest.name === "sandboxd" && typeof manifest.version === "string") return manifest.version;
    } catch {
      // No package.json here (or not ours): keep walking up.
    }
    const parent = path.dirname(directory);
    if (parent === directory) return "unknown";
    directory = parent;
  }
}
