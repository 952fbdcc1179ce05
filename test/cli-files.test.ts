import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { installCliShim, runCli } from "./support/cli.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { TerminalShell } from "./support/terminal.js";
import { runCommand } from "./support/tools.js";

let t: TestServer;
let local: string;
beforeAll(async () => {
  t = await startTestServer();
  local = path.join(tmpdir(), `sandbox-cli-files-${randomBytes(4).toString("hex")}`);
  mkdirSync(local);
});
afterAll(async () => {
  await t.close();
  rmSync(local, { recursive: true, force: true });
});

const cli = (args: readonly string[], options: { input?: string | Buffer } = {}) =>
  runCli(args, { url: t.server.url, cwd: local, timeoutMs: 60_000, ...options });

/** A fresh name for a test's files, in the workspace and locally. */
const fresh = () => `c-${randomBytes(4).toString("hex")}`;

/** A directory tree: a file, an executable, a nested file, an empty directory and a symlink. */
function makeTree(root: string): void {
  mkdirSync(path.join(root, "sub", "empty"), { recursive: true });
  writeFileSync(path.join(root, "a.txt"), "alpha\n");
  writeFileSync(path.join(root, "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o755 });
  chmodSync(path.join(root, "run.sh"), 0o755);
  writeFileSync(path.join(root, "sub", "data.bin"), randomBytes(2 * 1024 * 1024 + 3));
  symlinkSync("a.txt", path.join(root, "link"));
}

describe("sandbox cp", () => {
  it("uploads a file into a directory (keeping its name) or to a new name, and downloads it back, byte for byte", async () => {
    const name = fresh();
    mkdirSync(path.join(t.workspace, name));
    const data = randomBytes(5 * 1024 * 1024 + 1);
    writeFileSync(path.join(local, `${name}.bin`), data, { mode: 0o640 });
    chmodSync(path.join(local, `${name}.bin`), 0o640);
    const into = await cli(["cp", `${name}.bin`, `:${name}/`]);
    expect(into.stderr.toString()).toBe("");
    expect(into.code).toBe(0);
    expect(into.stdout.toString()).toBe("");
    expect(readFileSync(path.join(t.workspace, name, `${name}.bin`)).equals(data)).toBe(true);
    expect(statSync(path.join(t.workspace, name, `${name}.bin`)).mode & 0o777).toBe(0o640);
    expect((await cli(["cp", `${name}.bin`, `:${name}/renamed.bin`])).code).toBe(0);
    expect(readFileSync(path.join(t.workspace, name, "renamed.bin")).equals(data)).toBe(true);

    const back = await cli(["cp", `:${name}/renamed.bin`, `${name}.back`]);
    expect(back.code).toBe(0);
    expect(readFileSync(path.join(local, `${name}.back`)).equals(data)).toBe(true);
    expect(statSync(path.join(local, `${name}.back`)).mode & 0o777).toBe(0o640);
    mkdirSync(path.join(local, `${name}.dir`));
    expect((await cli(["cp", `:${name}/renamed.bin`, `${name}.dir`])).code).toBe(0);
    expect(readFileSync(path.join(local, `${name}.dir`, "renamed.bin")).equals(data)).toBe(true);
  });

  it("copies a directory recursively both ways: created when missing, into it when it exists, its contents with /.", async () => {
    const name = fresh();
    const tree = path.join(local, name);
    makeTree(tree);
    const up = await cli(["cp", name, `:${name}`]);
    expect(up.code).toBe(0);
    expect(up.stderr.toString()).toBe(
      `sandbox: warning: skipping ${path.join(name, "link")}: a symlink (the file API creates no links)\n`,
    );
    const remote = path.join(t.workspace, name);
    expect(readdirSync(remote).sort()).toEqual(["a.txt", "run.sh", "sub"]);
    expect(
      readFileSync(path.join(remote, "sub", "data.bin")).equals(readFileSync(path.join(tree, "sub", "data.bin"))),
    ).toBe(true);
    expect(statSync(path.join(remote, "run.sh")).mode & 0o777).toBe(0o755);
    expect(statSync(path.join(remote, "sub", "empty")).isDirectory()).toBe(true);

    // Into an existing directory: under the source's name.
    expect((await cli(["cp", name, `:${name}`])).code).toBe(0);
    expect(readFileSync(path.join(remote, name, "a.txt"), "utf8")).toBe("alpha\n");
    // Its contents only.
    mkdirSync(path.join(t.workspace, `${name}-flat`));
    expect((await cli(["cp", `${name}/.`, `:${name}-flat`])).code).toBe(0);
    expect(readdirSync(path.join(t.workspace, `${name}-flat`)).sort()).toEqual(["a.txt", "run.sh", "sub"]);

    // Back down, with a symlink made in the sandbox recreated as a symlink.
    symlinkSync("a.txt", path.join(remote, "link"));
    const down = await cli(["cp", `:${name}`, `${name}-back`]);
    expect(down.stderr.toString()).toBe("");
    expect(down.code).toBe(0);
    const back = path.join(local, `${name}-back`);
    expect(readdirSync(back).sort()).toEqual(["a.txt", "link", name, "run.sh", "sub"].sort());
    expect(readlinkSync(path.join(back, "link"))).toBe("a.txt");
    expect(lstatSync(path.join(back, "link")).isSymbolicLink()).toBe(true);
    expect(
      readFileSync(path.join(back, "sub", "data.bin")).equals(readFileSync(path.join(tree, "sub", "data.bin"))),
    ).toBe(true);
    expect(statSync(path.join(back, "run.sh")).mode & 0o777).toBe(0o755);
    expect(statSync(path.join(back, "sub", "empty")).isDirectory()).toBe(true);
  });

  it("copies stdin to a sandbox file and a sandbox file to stdout with -", async () => {
    const name = fresh();
    const data = randomBytes(3 * 1024 * 1024 + 11);
    const up = await cli(["cp", "-", `:${name}/from-stdin.bin`], { input: data });
    expect(up.stderr.toString()).toBe("");
    expect(up.code).toBe(0);
    expect(readFileSync(path.join(t.workspace, name, "from-stdin.bin")).equals(data)).toBe(true);
    const down = await cli(["cp", `:${name}/from-stdin.bin`, "-"]);
    expect(down.code).toBe(0);
    expect(createHash("sha256").update(down.stdout).digest("hex")).toBe(
      createHash("sha256").update(data).digest("hex"),
    );
    const toDirectory = await cli(["cp", "-", `:${name}`], { input: "x" });
    expect(toDirectory.code).toBe(1);
    expect(toDirectory.stderr.toString()).toBe(`sandbox: ${name} is a directory: name the file to write stdin to\n`);
  });

  it("fails with one line and exit code 1 when the daemon refuses, 2 on bad usage, and leaves nothing half-copied", async () => {
    const missing = await cli(["cp", ":no-such-file", "out"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr.toString()).toMatch(/^sandbox: .*no-such-file.*\n$/);
    expect(existsSync(path.join(local, "out"))).toBe(false);
    const outside = await cli(["cp", ":../etc/passwd", "out"]);
    expect(outside.code).toBe(1);
    expect(outside.stderr.toString()).toContain("PERMISSION_DENIED");
    const bothLocal = await cli(["cp", "a", "b"]);
    expect(bothLocal.code).toBe(2);
    expect(bothLocal.stderr.toString()).toBe("sandbox: one side of the copy must be in the sandbox, written :PATH\n");
    expect((await cli(["cp", ":a", ":b"])).code).toBe(2);
    expect((await cli(["cp", "only-one"])).code).toBe(2);
  });
});

describe("sandbox cp's progress", () => {
  it("is one line on a terminal for a transfer longer than half a second, erased at the end, and nothing elsewhere", async () => {
    const name = fresh();
    const bin = path.join(local, `${name}-bin`);
    mkdirSync(bin);
    installCliShim(bin);
    const env = { PATH: `${bin}:${process.env.PATH}`, SANDBOXD_URL: t.server.url };
    // The source pauses in the middle, so the transfer lasts past the half second whatever the machine's speed.
    const slowCopy = (target: string) =>
      `(head -c 1048576 /dev/zero; sleep 2; head -c 1048576 /dev/zero) | sandbox cp - :${name}/${target}`;
    const shell = TerminalShell.start({ env });
    try {
      shell.type(`${slowCopy("on-a-terminal.bin")}; printf 'EX%s=%s\\n' IT $?\r`);
      const shown = await shell.waitFor(/\d+\.\d MiB copied, 0 files, [\d.]+ (?:B|KiB|MiB)\/s/, { timeoutMs: 60_000 });
      const exit = await shell.waitFor(/EXIT=(\d+)/, { from: shown.end, timeoutMs: 60_000 });
      expect(exit.match[1]).toBe("0");
      expect(shell.screen.slice(shown.end, exit.end)).toContain("\r\x1b[K");
    } finally {
      shell.close();
    }
    expect(statSync(path.join(t.workspace, name, "on-a-terminal.bin")).size).toBe(2 * 1024 * 1024);
    const piped = await runCommand("bash", ["-o", "pipefail", "-c", slowCopy("piped.bin")], {
      cwd: local,
      env,
      timeoutMs: 60_000,
    });
    expect(piped.stderr).toBe("");
    expect(piped.code).toBe(0);
    expect(statSync(path.join(t.workspace, name, "piped.bin")).size).toBe(2 * 1024 * 1024);
  });
});

describe("sandbox ls", () => {
  it("lists names, a long format, JSON, to a depth, hiding dotfiles unless -a", async () => {
    const name = fresh();
    const dir = path.join(t.workspace, name);
    makeTree(dir);
    writeFileSync(path.join(dir, ".hidden"), "h");
    const names = await cli(["ls", name]);
    expect(names.stderr.toString()).toBe("");
    expect(names.stdout.toString()).toBe("a.txt\nlink\nrun.sh\nsub\n");
    expect((await cli(["ls", "-a", `:${name}`])).stdout.toString()).toBe(".hidden\na.txt\nlink\nrun.sh\nsub\n");
    expect((await cli(["ls", "--depth", "3", name])).stdout.toString()).toBe(
      "a.txt\nlink\nrun.sh\nsub\nsub/data.bin\nsub/empty\n",
    );

    const long = (await cli(["ls", "-l", name])).stdout.toString().trimEnd().split("\n");
    expect(long).toHaveLength(4);
    expect(long[0]).toMatch(/^-rw-r--r--\s+\S+\s+\S+\s+6\s+\d{4}-\d\d-\d\d \d\d:\d\d\s+a\.txt$/);
    expect(long[1]).toMatch(/^lrwxrwxrwx .* link -> a\.txt$/);
    expect(long[2]).toMatch(/^-rwxr-xr-x .* run\.sh$/);
    expect(long[3]).toMatch(/^drwxr-xr-x .* sub$/);

    const json = JSON.parse((await cli(["ls", "-o", "json", name])).stdout.toString()) as Record<string, unknown>[];
    expect(json.map((entry) => entry.name)).toEqual(["a.txt", "link", "run.sh", "sub"]);
    expect(json[0]).toMatchObject({
      path: path.join(dir, "a.txt"),
      type: "file",
      size: 6,
      mode: 0o644,
      permissions: "rw-r--r--",
    });
    expect(json[1]).toMatchObject({ type: "symlink", symlinkTarget: "a.txt" });
    expect(typeof json[0].modifiedTime).toBe("string");

    expect((await cli(["ls", `${name}/a.txt`])).stdout.toString()).toBe(`${name}/a.txt\n`);
    const missing = await cli(["ls", `${name}/nothing`]);
    expect(missing.code).toBe(1);
    expect(missing.stderr.toString()).toMatch(/^sandbox: .*nothing.*\n$/);
    expect((await cli(["ls", "--depth", "0", name])).code).toBe(2);
  });

  it("shows the control characters of names and link targets escaped, in every format, and in cp's warnings", async () => {
    // A command in the sandbox may name its files as it likes: an OSC 52 clipboard write, a line erase, a C1 CSI.
    const name = fresh();
    const dir = path.join(t.workspace, name);
    mkdirSync(dir);
    const hostile = "x\u001b]52;c;ZXZpbA==\u0007\u001b[2K\u009b31m\r";
    writeFileSync(path.join(dir, hostile), "h");
    symlinkSync(hostile, path.join(dir, "link"));
    mkfifoIn(path.join(dir, `fifo${hostile}`));
    const escaped = "x\\e]52;c;ZXZpbA==\\x07\\e[2K\\x9b31m\\r";
    const controls = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/;
    const names = (await cli(["ls", name])).stdout.toString();
    expect(names).toBe(`fifo${escaped}\nlink\n${escaped}\n`);
    const long = (await cli(["ls", "-l", name])).stdout.toString();
    expect(long).not.toMatch(controls);
    expect(long).toContain(`link -> ${escaped}\n`);
    const json = (await cli(["ls", "-o", "json", name])).stdout.toString();
    expect(json).not.toMatch(controls);
    expect((JSON.parse(json) as { name: string }[]).map((entry) => entry.name)).toEqual([
      `fifo${hostile}`,
      "link",
      hostile,
    ]);
    // cp skips the fifo with a warning that names it.
    const copy = await cli(["cp", `:${name}`, path.join(local, name)]);
    expect(copy.code).toBe(0);
    expect(copy.stderr.toString()).not.toMatch(controls);
    expect(copy.stderr.toString()).toContain(`fifo${escaped}: a fifo`);
  });
});

/** Makes a named pipe at `file`. */
function mkfifoIn(file: string): void {
  execFileSync("mkfifo", [file]);
}
