import { spawn, type ChildProcess } from "node:child_process";

/**
 * Spawns `file args` with child_process, reads (and discards) its stdout and stderr, and resolves
 * with the bytes read from stdout once it has exited and its pipes closed: the least a Node
 * program can do to run a command and collect its output.
 */
export function spawnAndRead(file: string, args: readonly string[] = []): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"] });
    let bytes = 0;
    child.stdout.on("data", (data: Buffer) => (bytes += data.length));
    child.stderr.resume();
    child.once("error", reject);
    child.once("close", () => resolve(bytes));
  });
}

/** Spawns `file args` with no pipes and resolves once the OS gave it a pid. */
export function spawnBackground(file: string, args: readonly string[]): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: "ignore" });
    child.once("error", reject);
    child.once("spawn", () => resolve(child));
  });
}
