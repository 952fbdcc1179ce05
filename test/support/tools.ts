import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root. */
export const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** Where test/setup-tools.sh installs grpcurl, protoc-gen-go and protoc-gen-go-grpc. */
export const toolsBin = path.join(repositoryRoot, ".tools/bin");

/** The Python of the project's venv (grpcio, grpcio-tools), made by test/setup-tools.sh. */
export const venvPython = path.join(repositoryRoot, ".venv/bin/python");

/** The path of an installed tool; throws, naming the setup script, when it is missing. */
export function tool(name: string): string {
  const file = name === "python" ? venvPython : path.join(toolsBin, name);
  if (!existsSync(file)) throw new Error(`${file} is missing: run 'bash test/setup-tools.sh' first`);
  return file;
}

/** What a finished command left. */
export interface CommandResult {
  /** Exit code, or null when ended by a signal. */
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Options for {@link runCommand}. */
export interface RunCommandOptions {
  /** Written to the command's stdin, which is then closed. */
  input?: string | Buffer;
  /** Killed with SIGKILL after this many milliseconds (then the promise rejects). Default 30 000. */
  timeoutMs?: number;
  /** Working directory. Default the repository root. */
  cwd?: string;
  /** Extra environment variables. */
  env?: NodeJS.ProcessEnv;
}

/**
 * Runs a program (no shell) to its end and collects its output. Rejects only when it cannot be
 * started or runs past `timeoutMs`; a non-zero exit is in the result.
 */
export function runCommand(
  file: string,
  args: readonly string[],
  options: RunCommandOptions = {},
): Promise<CommandResult> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      cwd: options.cwd ?? repositoryRoot,
      env: { ...process.env, PATH: `${toolsBin}:${process.env.PATH}`, ...options.env },
      stdio: ["pipe", "pipe", "pipe"],
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on("data", (chunk: Buffer) => stderr.push(chunk));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(
        new Error(
          `${path.basename(file)} ${args.join(" ")} ran past ${timeoutMs} ms: ${Buffer.concat(stderr).toString()}`,
        ),
      );
    }, timeoutMs);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout: Buffer.concat(stdout).toString(), stderr: Buffer.concat(stderr).toString() });
    });
    child.stdin.on("error", () => {});
    child.stdin.end(options.input ?? "");
  });
}

/** Splits the concatenated pretty-printed JSON objects grpcurl prints into parsed values. */
export function parseJsonStream(text: string): unknown[] {
  const values: unknown[] = [];
  let depth = 0;
  let start = -1;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const char = text[i];
    if (inString) {
      if (char === "\\") i++;
      else if (char === '"') inString = false;
      continue;
    }
    if (char === '"') inString = true;
    else if (char === "{") {
      if (depth++ === 0) start = i;
    } else if (char === "}" && --depth === 0) values.push(JSON.parse(text.slice(start, i + 1)));
  }
  return values;
}
