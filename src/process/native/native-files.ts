import { accessSync, constants as fsConstants } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Finds one of the files `npm install` builds into this package's `build/` directory
 * (`sandboxd-exec`, `sandboxd.node`): first at the path in `override` (a variable the one-file build
 * sets to where it unpacked them), then in `build/` searched upwards from this module, so sources,
 * compiled output (dist/) and bundles all find it. Returns undefined when none is accessible in `mode`
 * (`fs.constants.X_OK`, `R_OK`).
 */
export function findNativeFile(name: string, override: string | undefined, mode: number): string | undefined {
  const candidates = [override];
  let directory = path.dirname(fileURLToPath(import.meta.url));
  for (let level = 0; level < 6; level++) {
    candidates.push(path.join(directory, "build", name));
    directory = path.dirname(directory);
  }
  for (const candidate of candidates) {
    if (candidate === undefined || candidate === "") continue;
    try {
      accessSync(candidate, mode);
      return candidate;
    } catch {
      // Try the next.
    }
  }
  return undefined;
}

/** `fs.constants.X_OK` and `R_OK`, for {@link findNativeFile}'s mode. */
export const { X_OK: executable, R_OK: readable } = fsConstants;
