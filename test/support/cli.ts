import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { chmodSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { repositoryRoot } from "./tools.js";

/** The `sandbox` CLI's entry, run from source. */
export const cliEntry = path.join(repositoryRoot, "src/cli/sandbox.ts");

/** tsx's loader, by absolute path, so the CLI starts from any working directory. */
const tsxLoader = createRequire(import.meta.url).resolve("tsx");

/** The command line that starts the CLI from source: `node --import tsx src/cli/sandbox.ts`. */
export const cliCommand: readonly string[] = [process.execPath, "--import", tsxLoader, cliEntry];

/** What a finished CLI run left, as bytes. */
export interface CliResult {
  /** Exit code, or null when a signal ended it. */
  code: number | null;
  /** The signal that ended it, if any. */
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: Buffer;
}

/** Options of {@link runCli} and {@link spawnCli}. */
export interface CliOptions {
  /** The daemon's URL, passed as SANDBOXD_URL. */
  url?: string;
  /** Extra environment variables (SANDBOXD_URL, SANDBOXD_TOKEN and the old SANDBOX_URL and SANDBOX_TOKEN are cleared first, so a test sets what it means). */
  env?: NodeJS.ProcessEnv;
  /** Working directory; the repository root by default. */
  cwd?: string;
}

/** Starts the CLI with pipes for its three streams. */
export function spawnCli(args: readonly string[], options: CliOptions = {}): ChildProcessWithoutNullStreams {
  const cleared = {
    SANDBOXD_URL: undefined,
    SANDBOXD_TOKEN: undefined,
    SANDBOX_URL: undefined,
    SANDBOX_TOKEN: undefined,
  };
  const env: NodeJS.ProcessEnv = { ...process.env, ...cleared, ...options.env };
  if (options.url !== undefined) env.SANDBOXD_URL = options.url;
  for (const key of Object.keys(env)) if (env[key] === undefined) delete env[key];
  return spawn(cliCommand[0], [...cliCommand.slice(1), ...args], {
    cwd: options.cwd ?? repositoryRoot,
    env,
    stdio: ["pipe", "pipe", "pipe"],
  });
}

/**
 * Runs the CLI to its end and collects its output as bytes; `input` is written to its stdin, which is
 * then closed (closed at once without it). Rejects when it runs past `timeoutMs` (it is then killed).
 */
export function runCli(
  args: readonly string[],
  options: CliOptions & { input?: string | Buffer; timeoutMs?: number } = {},
): Promise<CliResult> {
  const child = spawnCli(args, options);
  child.stdin.on("error", () => {});
  child.stdin.end(options.input);
  return collect(child, options.timeoutMs ?? 30_000, args);
}

/** Collects a spawned CLI's output until it exits. */
export function collect(
  child: ChildProcessWithoutNullStreams,
  timeoutMs = 30_000,
  args: readonly string[] = [],
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on("data", (chunk: Buffer) => stderr.push(chunk));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(
        new Error(`sandbox ${args.join(" ")} ran past ${timeoutMs} ms; stderr: ${Buffer.concat(stderr).toString()}`),
      );
    }, timeoutMs);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) });
    });
  });
}

/**
 * Writes an executable `sandbox` into `dir` that runs the CLI from source, so a shell (a README
 * block, a terminal test) can type `sandbox ...` as a user would once the package is installed.
 */
export function installCliShim(dir: string): string {
  const file = path.join(dir, "sandbox");
  const quoted = cliCommand.map((word) => `'${word.replaceAll("'", `'\\''`)}'`).join(" ");
  writeFileSync(file, `#!/bin/sh\nexec ${quoted} "$@"\n`);
  chmodSync(file, 0o755);
  return file;
}
