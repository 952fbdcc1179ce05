import { mkdir, readdir, stat, symlink, chmod } from "node:fs/promises";
import path from "node:path";
import { Command } from "commander";
import { type FileInfo, type SandboxFiles, SandboxError } from "../../../client/index.js";
import { addConnectionOptions, closeSandbox, openSandbox, type ConnectionFlags } from "../connection.js";
import { escapeControls } from "../escape.js";
import { CliError, exitCodes } from "../exit-codes.js";
import { BrokenPipeError, LocalOutput } from "../local-output.js";
import { TransferProgress } from "../progress.js";

/** The flags of `sandbox cp`. */
export interface CpFlags extends ConnectionFlags {
  /** No progress line, even on a terminal (-q). */
  quiet?: boolean;
}

/** One side of a copy: a path on this machine, a path in the sandbox (`:path`), or stdin/stdout (`-`). */
export type CopyEnd = { kind: "local"; path: string } | { kind: "remote"; path: string } | { kind: "stdio" };

/** Creates the `cp` command; `finish` receives its exit code. */
export function createCpCommand(finish: (code: number) => void): Command {
  const command = new Command("cp")
    .summary("copy files and directories between this machine and the sandbox")
    .description(
      "Copy a file or a directory (recursively) to or from the sandbox, as docker cp and kubectl cp do, with the " +
        "sandbox side written :PATH (relative to the daemon's first workspace root, or absolute inside a root; : alone " +
        "is the root itself). A local path that starts with a colon is written ./:name.\n\n" +
        "  sandbox cp ./app.tar.gz :uploads/       upload into a directory (the name is kept)\n" +
        "  sandbox cp :logs/run.log ./run.log      download a file\n" +
        "  sandbox cp ./src :project/src           upload a directory (created when missing; into it when it exists)\n" +
        "  sandbox cp ./src/. :project/src         upload a directory's contents\n" +
        "  tar c . | sandbox cp - :backup.tar      stdin to a sandbox file (raw bytes, not a tar stream as docker's -)\n" +
        "  sandbox cp :backup.tar - | tar t        a sandbox file to stdout\n\n" +
        "As with docker cp: a destination that is an existing directory receives the source under its own name; a " +
        "destination ending in / must be an existing directory. Files keep their permission bits; a file appears " +
        "whole or not at all (written aside and renamed into place), and a cancelled copy leaves none of the file it " +
        "was copying. Symlinks are recreated on download; on upload they are skipped with a warning (the file API " +
        "creates no links), as are devices, FIFOs and sockets. On a terminal, a transfer that takes more than half " +
        "a second shows its progress on stderr (not with -q).",
    )
    .argument("<source>", "what to copy: a local path, :path in the sandbox, or - for stdin")
    .argument("<destination>", "where to: a local path, :path in the sandbox, or - for stdout")
    .option("-q, --quiet", "show no progress, even on a terminal");
  addConnectionOptions(command);
  return command.action(async (source: string, destination: string, flags: CpFlags) =>
    finish(await runCp(source, destination, flags)),
  );
}

/** A command-line argument as one side of a copy. */
export function parseCopyEnd(text: string): CopyEnd {
  if (text === "-") return { kind: "stdio" };
  if (text.startsWith(":")) return { kind: "remote", path: text.length === 1 ? "." : text.slice(1) };
  return { kind: "local", path: text };
}

/** Runs `sandbox cp`. */
export async function runCp(sourceText: string, destinationText: string, flags: CpFlags): Promise<number> {
  const source = parseCopyEnd(sourceText);
  const destination = parseCopyEnd(destinationText);
  if (source.kind !== "remote" && destination.kind !== "remote") {
    throw new CliError("one side of the copy must be in the sandbox, written :PATH", { usage: true });
  }
  if (source.kind === "remote" && destination.kind === "remote") {
    throw new CliError("both sides are in the sandbox: copy to or from this machine (or use sandbox exec -- cp)", {
      usage: true,
    });
  }
  const sandbox = await openSandbox(flags);
  const progress = TransferProgress.forStderr(flags.quiet);
  try {
    const copier = new Copier(sandbox.files, progress);
    if (source.kind === "stdio" && destination.kind === "remote") await copier.fromStdin(destination.path);
    else if (source.kind === "remote" && destination.kind === "stdio") await copier.toStdout(source.path);
    else if (source.kind === "local" && destination.kind === "remote")
      await copier.upload(source.path, destination.path);
    else if (source.kind === "remote" && destination.kind === "local")
      await copier.download(source.path, destination.path);
    return exitCodes.ok;
  } catch (error) {
    // The reader of stdout went away (`| head`): nothing more to say.
    if (error instanceof BrokenPipeError) return exitCodes.ok;
    throw error;
  } finally {
    progress.finish();
    await closeSandbox(sandbox);
  }
}

/** The copies of one `sandbox cp`, all counted on one progress line. */
class Copier {
  constructor(
    private readonly files: SandboxFiles,
    private readonly progress: TransferProgress,
  ) {}

  /** Copies stdin to a sandbox file. */
  async fromStdin(remote: string): Promise<void> {
    const existing = await this.remoteStat(remote);
    if (existing?.type === "directory" || remote.endsWith("/"))
      throw new CliError(`${remote} is a directory: name the file to write stdin to`);
    this.progress.startFile(remote);
    await this.files.write(remote, process.stdin, { onProgress: (sent) => this.progress.fileProgress(sent) });
    this.progress.fileDone();
  }

  /** Copies a sandbox file to stdout, as it arrives. */
  async toStdout(remote: string): Promise<void> {
    const output = new LocalOutput();
    this.progress.startFile(remote);
    let written = 0;
    for await (const chunk of this.files.iterate(remote)) {
      await output.write("stdout", chunk);
      this.progress.fileProgress((written += chunk.length));
    }
    this.progress.fileDone();
  }

  /** Copies a local file or directory into the sandbox, by docker cp's rules. */
  async upload(local: string, remote: string): Promise<void> {
    const contentsOnly = /(^|\/)\.$/.test(local);
    const source = await stat(local).catch((error: NodeJS.ErrnoException) => {
      throw new CliError(`cannot read ${local}: ${describeErrno(error)}`, { cause: error });
    });
    const existing = await this.remoteStat(remote);
    const name = path.basename(path.resolve(local));
    if (source.isDirectory()) {
      if (existing !== undefined && existing.type !== "directory")
        throw new CliError(`cannot copy a directory onto a file: :${remote}`);
      const target = existing === undefined || contentsOnly ? remote : path.posix.join(remote, name);
      await this.uploadTree(local, target);
    } else if (source.isFile()) {
      if (existing === undefined && remote.endsWith("/")) throw new CliError(`the directory :${remote} does not exist`);
      await this.uploadFile(local, existing?.type === "directory" ? path.posix.join(remote, name) : remote);
    } else {
      throw new CliError(`${local} is not a regular file or a directory`);
    }
  }

  /** Copies a sandbox file or directory to this machine, by docker cp's rules. */
  async download(remote: string, local: string): Promise<void> {
    const contentsOnly = /(^|\/)\.$/.test(remote);
    const source = await this.files.stat(remote, { followSymlinks: true });
    const existing = await stat(local).catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return undefined;
      throw new CliError(`cannot use ${local}: ${describeErrno(error)}`, { cause: error });
    });
    if (source.type === "directory") {
      if (existing !== undefined && !existing.isDirectory())
        throw new CliError(`cannot copy a directory onto a file: ${local}`);
      const target = existing === undefined || contentsOnly ? local : path.join(local, source.name);
      await this.downloadTree(source, target);
    } else if (source.type === "file") {
      if (existing === undefined && local.endsWith("/")) throw new CliError(`the directory ${local} does not exist`);
      await this.downloadFile(source.path, existing?.isDirectory() === true ? path.join(local, source.name) : local);
    } else {
      throw new CliError(`:${remote} is a ${source.type}, not a regular file or a directory`);
    }
  }

  private async uploadTree(local: string, remote: string): Promise<void> {
    const mode = (await stat(local)).mode & 0o7777;
    await this.files.mkdir(remote, { recursive: true });
    for (const entry of await readdir(local, { withFileTypes: true })) {
      const from = path.join(local, entry.name);
      const to = path.posix.join(remote, entry.name);
      if (entry.isDirectory()) await this.uploadTree(from, to);
      else if (entry.isFile()) await this.uploadFile(from, to);
      else
        warn(
          `skipping ${from}: ${entry.isSymbolicLink() ? "a symlink (the file API creates no links)" : "not a regular file or a directory"}`,
        );
    }
    // Last, so a directory without write permission still received its entries.
    if (mode !== 0o755) await this.files.chmod(remote, mode);
  }

  private async uploadFile(local: string, remote: string): Promise<void> {
    this.progress.startFile(local);
    await this.files.uploadFile(local, remote, { onProgress: (sent) => this.progress.fileProgress(sent) });
    this.progress.fileDone();
  }

  private async downloadTree(directory: FileInfo, local: string): Promise<void> {
    await mkdir(local, { recursive: true });
    for await (const entry of this.files.entries(directory.path)) {
      const to = path.join(local, entry.name);
      if (entry.type === "directory") await this.downloadTree(entry, to);
      else if (entry.type === "file") await this.downloadFile(entry.path, to);
      else if (entry.type === "symlink" && entry.symlinkTarget !== undefined) await symlink(entry.symlinkTarget, to);
      else warn(`skipping :${entry.path}: a ${entry.type}, not a regular file or a directory`);
    }
    await chmod(local, directory.mode & 0o7777);
  }

  private async downloadFile(remote: string, local: string): Promise<void> {
    this.progress.startFile(remote);
    await this.files.downloadFile(remote, local, { onProgress: (received) => this.progress.fileProgress(received) });
    this.progress.fileDone();
  }

  /** What is at a sandbox path (symlinks followed), or undefined when nothing is. */
  private async remoteStat(remote: string): Promise<FileInfo | undefined> {
    try {
      return await this.files.stat(remote, { followSymlinks: true });
    } catch (error) {
      if (error instanceof SandboxError && error.reason === "PATH_NOT_FOUND") return undefined;
      throw error;
    }
  }
}

/** A warning on stderr, as one `sandbox: warning: ...` line, its control characters escaped (paths come from the sandbox). */
function warn(text: string): void {
  process.stderr.write(`sandbox: warning: ${escapeControls(text)}\n`);
}

/** A local file error as a few words: `no such file or directory (ENOENT)`. */
function describeErrno(error: NodeJS.ErrnoException): string {
  const words: Record<string, string> = {
    ENOENT: "no such file or directory",
    EACCES: "permission denied",
    ENOTDIR: "not a directory",
    EISDIR: "is a directory",
  };
  return error.code === undefined ? error.message : `${words[error.code] ?? error.message} (${error.code})`;
}
