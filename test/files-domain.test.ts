import {
  chownSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
  chmodSync,
  lstatSync,
  readlinkSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileError, WorkspaceFiles, type FileReader } from "../src/files/index.js";
import { resolveUser } from "../src/process/index.js";

// The file domain without a server: confinement in each lookup mode (openat2 through the addon, the
// addon's component walk, and Node's fs walk for a daemon without the addon), a symlink swapped in
// while lookups run, and identity as root on behalf of an unprivileged user.

const isRoot = process.getuid?.() === 0;

async function readAll(reader: FileReader): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const event of reader.events()) if (event.kind === "chunk") parts.push(event.data);
  return Buffer.concat(parts);
}

async function reasonOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof FileError) return error.reason;
    throw error;
  }
  return "resolved";
}

let base: string;
let workspace: string;
beforeAll(() => {
  base = mkdtempSync(path.join(os.tmpdir(), "files-domain-"));
  workspace = path.join(base, "ws");
  mkdirSync(path.join(workspace, "sub"), { recursive: true });
  writeFileSync(path.join(base, "secret"), "the secret");
  writeFileSync(path.join(workspace, "sub", "inside.txt"), "inside");
  symlinkSync("../secret", path.join(workspace, "relative-escape"));
  symlinkSync(path.join(base, "secret"), path.join(workspace, "absolute-escape"));
  symlinkSync(path.join(workspace, "sub", "inside.txt"), path.join(workspace, "absolute-inside"));
  symlinkSync("sub/../sub/inside.txt", path.join(workspace, "relative-inside"));
  symlinkSync("..", path.join(workspace, "sub", "up"));
  symlinkSync(base, path.join(workspace, "directory-escape"));
  symlinkSync("loop-b", path.join(workspace, "loop-a"));
  symlinkSync("loop-a", path.join(workspace, "loop-b"));
});
afterAll(() => rmSync(base, { recursive: true, force: true }));

const modes = [
  { name: "openat2 through the addon", options: {} },
  { name: "the addon's component walk", options: { walkOnly: true } },
  { name: "Node's fs walk (no addon)", options: { withoutAddon: true, walkOnly: true } },
];

describe.each(modes)("confinement: $name", ({ options }) => {
  let files: WorkspaceFiles;
  beforeAll(async () => {
    files = await WorkspaceFiles.create({ workspaceRoots: [workspace], ...options });
  });
  afterAll(() => files.close());

  it("refuses .., absolute paths elsewhere and symlinks that lead out, with PATH_OUTSIDE_WORKSPACE", async () => {
    for (const escape of [
      "..",
      "../secret",
      "sub/../../secret",
      "/etc/passwd",
      base,
      `${workspace}/../secret`,
      "relative-escape",
      "absolute-escape",
      "sub/up/relative-escape",
    ]) {
      expect(await reasonOf(files.openRead(escape)), escape).toBe("PATH_OUTSIDE_WORKSPACE");
    }
    expect(await reasonOf(files.stat("relative-escape", { followSymlinks: true }))).toBe("PATH_OUTSIDE_WORKSPACE");
    expect(await reasonOf(files.list("directory-escape"))).toBe("PATH_OUTSIDE_WORKSPACE");
    expect(await reasonOf(files.watch("directory-escape"))).toBe("PATH_OUTSIDE_WORKSPACE");
    expect(await reasonOf(files.createWriter({ path: "directory-escape/new" }))).toBe("PATH_OUTSIDE_WORKSPACE");
    expect(await reasonOf(files.makeDirectory("directory-escape/new"))).toBe("PATH_OUTSIDE_WORKSPACE");
    expect(await reasonOf(files.chmod("absolute-escape", 0o777))).toBe("PATH_OUTSIDE_WORKSPACE");
    expect(statSync(path.join(base, "secret")).mode & 0o777).toBe(0o644);
  });

  it("follows symlinks that stay inside, relative or absolute, and describes a symlink as itself", async () => {
    expect((await readAll(await files.openRead("relative-inside"))).toString()).toBe("inside");
    expect((await readAll(await files.openRead("absolute-inside"))).toString()).toBe("inside");
    expect((await readAll(await files.openRead(`${workspace}/sub/up/sub/inside.txt`))).toString()).toBe("inside");
    const link = await files.stat("relative-escape");
    expect(link).toMatchObject({
      kind: "symlink",
      symlinkTarget: "../secret",
      path: path.join(workspace, "relative-escape"),
    });
    expect(await reasonOf(files.openRead("loop-a"))).toBe("SYMLINK_LOOP");
  });

  it("writes replace a symlink rather than write through it, and never leave the temporary file", async () => {
    symlinkSync(path.join(base, "secret"), path.join(workspace, "planted"));
    const writer = await files.createWriter({ path: "planted" });
    await writer.write(Buffer.from("mine"));
    await writer.commit();
    expect(readFileSync(path.join(base, "secret"), "utf8")).toBe("the secret");
    expect(lstatSync(path.join(workspace, "planted")).isFile()).toBe(true);
    expect(readFileSync(path.join(workspace, "planted"), "utf8")).toBe("mine");
    rmSync(path.join(workspace, "planted"));
    const aborted = await files.createWriter({ path: "sub/aborted.txt" });
    await aborted.write(Buffer.alloc(1000));
    await aborted.abort();
    expect((await files.list("sub")).entries.map((entry) => entry.name)).toEqual(["inside.txt", "up"]);
  });
});

describe.each(modes)("a symlink swapped in while lookups run: $name", ({ options }) => {
  it("never reads a byte from outside the workspace", async () => {
    const files = await WorkspaceFiles.create({ workspaceRoots: [workspace], ...options });
    const here = mkdtempSync(path.join(workspace, "race-"));
    const real = path.join(here, "swap-real");
    const link = path.join(here, "swap-link");
    mkdirSync(real);
    writeFileSync(path.join(real, "file"), "inside");
    symlinkSync(base, link);
    const swapped = path.join(here, "swap");
    renameSync(real, swapped);
    let stop = false;
    // Swaps the directory `swap` with a symlink to the directory holding the secret, as fast as it can.
    const swapper = (async () => {
      let flips = 0;
      while (!stop) {
        renameSync(swapped, real);
        renameSync(link, swapped);
        await new Promise((resolve) => setImmediate(resolve));
        renameSync(swapped, link);
        renameSync(real, swapped);
        flips++;
        await new Promise((resolve) => setImmediate(resolve));
      }
      return flips;
    })();
    const outcomes = new Map<string, number>();
    try {
      for (let attempt = 0; attempt < 300; attempt++) {
        for (const name of [`${path.basename(here)}/swap/file`, `${path.basename(here)}/swap/secret`]) {
          let outcome: string;
          try {
            outcome = (await readAll(await files.openRead(name))).toString();
          } catch (error) {
            outcome = error instanceof FileError ? error.reason : String(error);
          }
          outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        }
      }
    } finally {
      stop = true;
      // The swaps ran all along the reads (one per turn of the event loop).
      expect(await swapper).toBeGreaterThan(50);
      await files.close();
    }
    expect([...outcomes.keys()].sort()).not.toContain("the secret");
    for (const outcome of outcomes.keys())
      expect(["inside", "PATH_OUTSIDE_WORKSPACE", "PATH_NOT_FOUND"]).toContain(outcome);
    expect(outcomes.get("inside")).toBeGreaterThan(0);
  });
});

describe.skipIf(!isRoot)("identity: a root daemon acting for an unprivileged user", () => {
  const nobody = isRoot ? resolveUser("nobody") : undefined!;
  let files: WorkspaceFiles;
  let userSpace: string;
  let rootSpace: string;
  beforeAll(async () => {
    userSpace = path.join(base, "user-space");
    rootSpace = path.join(base, "root-space");
    mkdirSync(userSpace);
    mkdirSync(rootSpace);
    chownSync(userSpace, nobody.uid, nobody.gid);
    chmodSync(base, 0o755);
    writeFileSync(path.join(rootSpace, "root-only"), "root's", { mode: 0o600 });
    writeFileSync(path.join(rootSpace, "readable"), "anyone's", { mode: 0o644 });
    symlinkSync(path.join(rootSpace, "root-only"), path.join(userSpace, "link-to-root-only"));
    files = await WorkspaceFiles.create({ workspaceRoots: [userSpace, rootSpace], user: nobody });
  });
  afterAll(() => files.close());

  it("creates files and directories that belong to the user, with the modes asked", async () => {
    const writer = await files.createWriter({ path: "made/by/nobody.txt", createParents: true, mode: 0o640 });
    await writer.write(Buffer.from("hi"));
    const stat = await writer.commit();
    expect(stat).toMatchObject({ uid: nobody.uid, gid: nobody.gid, mode: 0o640, owner: "nobody" });
    for (const made of ["made", "made/by", "made/by/nobody.txt"])
      expect(statSync(path.join(userSpace, made)).uid).toBe(nobody.uid);
    const { stat: directory } = await files.makeDirectory("made/dir", { mode: 0o700 });
    expect(directory).toMatchObject({ uid: nobody.uid, mode: 0o700, kind: "directory" });
  });

  it("refuses what the user may not do, with PATH_NOT_ACCESSIBLE, where the daemon itself could", async () => {
    expect(await reasonOf(files.openRead(path.join(rootSpace, "root-only")))).toBe("PATH_NOT_ACCESSIBLE");
    expect(await reasonOf(files.openRead("link-to-root-only"))).toBe("PATH_NOT_ACCESSIBLE");
    expect((await readAll(await files.openRead(path.join(rootSpace, "readable")))).toString()).toBe("anyone's");
    expect(await reasonOf(files.createWriter({ path: path.join(rootSpace, "new") }))).toBe("PATH_NOT_ACCESSIBLE");
    expect(await reasonOf(files.chmod(path.join(rootSpace, "readable"), 0o666))).toBe("PATH_NOT_ACCESSIBLE");
    expect(await reasonOf(files.remove(path.join(rootSpace, "readable")))).toBe("PATH_NOT_ACCESSIBLE");
    expect(await reasonOf(files.move(path.join(rootSpace, "readable"), "stolen"))).toBe("PATH_NOT_ACCESSIBLE");
    expect(statSync(path.join(rootSpace, "readable")).mode & 0o777).toBe(0o644);
  });

  it("replaces a symlink the user planted to a root-only file instead of writing through it", async () => {
    const writer = await files.createWriter({ path: "link-to-root-only" });
    await writer.write(Buffer.from("overwritten?"));
    await writer.commit();
    expect(readFileSync(path.join(rootSpace, "root-only"), "utf8")).toBe("root's");
    expect(lstatSync(path.join(userSpace, "link-to-root-only")).uid).toBe(nobody.uid);
    expect(() => readlinkSync(path.join(userSpace, "link-to-root-only"))).toThrow();
  });

  it("leaves the thread it ran on as it was: the daemon's own calls still run as root", async () => {
    const own = await WorkspaceFiles.create({ workspaceRoots: [rootSpace] });
    try {
      for (let round = 0; round < 20; round++) {
        await Promise.all([
          reasonOf(files.openRead(path.join(rootSpace, "root-only"))),
          readAll(await own.openRead("root-only")),
        ]);
      }
      expect((await readAll(await own.openRead("root-only"))).toString()).toBe("root's");
    } finally {
      await own.close();
    }
  });
});
