import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, symlinkSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createProcessManager, Launcher, resolveUser } from "../src/process/index.js";
import { Code, collectExec, rpcError, streamError } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const isRoot = process.getuid?.() === 0;
/** A daemon that switches users needs a token (see assertSafeUserSwitch). */
const token = "security-user-token";

/** A user with a supplementary group, from the group database, or undefined. */
function userWithSupplementaryGroup(): { name: string; groups: number[] } | undefined {
  try {
    for (const line of execFileSync("getent", ["group"], { encoding: "utf8" }).split("\n")) {
      const [, , , members] = line.split(":");
      const name = members?.split(",").find(Boolean);
      if (name === undefined) continue;
      const groups = execFileSync("id", ["-G", name], { encoding: "utf8" }).trim().split(/\s+/).map(Number);
      if (groups.length > 1) return { name, groups };
    }
  } catch {
    // No getent or id: no such user to test with.
  }
  return undefined;
}

describe.skipIf(!isRoot)("--user: who runs the command", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  const openWorkspace = (server: TestServer) => chmodSync(server.workspace, 0o755);

  it("runs as the user's uid and gid, with HOME, USER and LOGNAME of that user", async () => {
    const nobody = resolveUser("nobody");
    test = await startTestServer({ runAs: nobody, token }, { sendToken: true });
    openWorkspace(test);
    const result = await collectExec(test.client, { command: 'id -u; id -g; id -G; echo "$HOME|$USER|$LOGNAME"' });
    expect(result.stderr.toString()).toBe("");
    const [uid, gid, groups, env] = result.stdout.toString().trim().split("\n");
    expect(Number(uid)).toBe(nobody.uid);
    expect(Number(gid)).toBe(nobody.gid);
    // The daemon's own supplementary groups (root's) are not kept.
    expect(groups.split(" ").map(Number)).not.toContain(0);
    expect(env).toBe(`${nobody.home}|nobody|nobody`);
  });

  it("gives the user its supplementary groups, as initgroups does", async (context) => {
    const user = userWithSupplementaryGroup();
    if (user === undefined || !Launcher.create().initializesGroups) return context.skip();
    test = await startTestServer({ runAs: resolveUser(user.name), token }, { sendToken: true });
    openWorkspace(test);
    const result = await collectExec(test.client, { command: "id -G", pty: {} });
    const groups = result.stdout.toString().trim().split(/\s+/).map(Number);
    expect(groups.sort()).toEqual([...user.groups].sort());
  });

  it("applies the user to PTY commands too", async () => {
    test = await startTestServer({ runAs: resolveUser("nobody"), token }, { sendToken: true });
    openWorkspace(test);
    const result = await collectExec(test.client, { command: "id -un; echo $HOME", pty: {} });
    expect(result.stdout.toString().replaceAll("\r", "")).toBe("nobody\n/nonexistent\n");
  });

  it("runs sudo requests as root only when the daemon allows it", async () => {
    test = await startTestServer({ runAs: resolveUser("nobody"), allowSudo: true, token }, { sendToken: true });
    openWorkspace(test);
    const asRoot = await collectExec(test.client, { command: 'id -u; echo "$HOME|$USER"', sudo: true });
    expect(asRoot.stdout.toString()).toBe("0\n/root|root\n");
    const asUser = await collectExec(test.client, { command: "id -u" });
    expect(asUser.stdout.toString()).toBe("65534\n");
  });

  it("refuses sudo with PERMISSION_DENIED without --allow-sudo, on Exec and StartProcess", async () => {
    test = await startTestServer({ runAs: resolveUser("nobody"), token }, { sendToken: true });
    const exec = await streamError(test.client.exec({ spec: { command: "id -u", sudo: true } }));
    expect(exec.code).toBe(Code.PermissionDenied);
    expect(exec.rawMessage).toBe("sudo is not allowed by this daemon");
    const start = await rpcError(test.client.startProcess({ spec: { command: "id -u", sudo: true } }));
    expect(start.code).toBe(Code.PermissionDenied);
  });

  it("the user cannot write where the daemon's user can", async () => {
    test = await startTestServer({ runAs: resolveUser("nobody"), token }, { sendToken: true });
    openWorkspace(test);
    const result = await collectExec(test.client, { command: "touch /root/sandboxd-should-not-exist" });
    expect(result.exited.exitCode).not.toBe(0);
    expect(result.stderr.toString()).toContain("Permission denied");
  });
});

describe("sudo needs a root daemon", () => {
  afterEach(() => vi.restoreAllMocks());

  it("refuses sudo with PERMISSION_DENIED when the daemon is not root, even when allowed", async () => {
    const manager = await createProcessManager({ allowSudo: true });
    vi.spyOn(process, "getuid").mockReturnValue(1000);
    await expect(manager.start({ command: "id -u", sudo: true })).rejects.toMatchObject({
      reason: "SUDO_NOT_ALLOWED",
      message: "sudo needs the daemon to run as root",
    });
  });
});

describe("resolving users", () => {
  it("resolves names and uids, and refuses unknown names", () => {
    expect(resolveUser("root")).toMatchObject({
      name: "root",
      uid: 0,
      gid: 0,
      home: "/root",
      shell: expect.stringMatching(/^\//),
    });
    expect(resolveUser("0").name).toBe("root");
    expect(resolveUser("54321")).toEqual({ name: "54321", uid: 54321, gid: 54321, home: "/" });
    expect(() => resolveUser("no-such-user-sandboxd")).toThrow("unknown user: no-such-user-sandboxd");
  });
});

describe("workspace confinement, beyond the error cases", () => {
  let test: TestServer | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
  });

  it("allows a symlink that stays inside, refuses a sibling whose name starts like the root", async () => {
    test = await startTestServer();
    mkdirSync(path.join(test.workspace, "real"));
    symlinkSync(path.join(test.workspace, "real"), path.join(test.workspace, "link"));
    const inside = await collectExec(test.client, { command: "pwd", cwd: "link" });
    expect(inside.stdout.toString()).toBe(`${path.join(test.workspace, "real")}\n`);
    const sibling = `${test.workspace}-evil`;
    mkdirSync(sibling);
    try {
      const error = await streamError(test.client.exec({ spec: { command: "pwd", cwd: sibling } }));
      expect(error.code).toBe(Code.PermissionDenied);
      const dotted = await streamError(
        test.client.exec({ spec: { command: "pwd", cwd: `../${path.basename(sibling)}` } }),
      );
      expect(dotted.code).toBe(Code.PermissionDenied);
    } finally {
      execFileSync("rmdir", [sibling]);
    }
  });
});
