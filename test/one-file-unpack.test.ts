// Where the one-file daemon unpacks its native helper and addon (SANDBOXD_UNPACK_DIR): a directory in which
// another user may rename entries would let that user swap the daemon's directory for one of their own, and the
// daemon (root, often) would run their helper for every command. unpackInto is what the one-file daemon calls at
// start with its assets; here with stand-in bytes.
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { unpackInto, type NativeFile } from "../src/cli/sandboxd/one-file-natives.js";

const isRoot = process.getuid?.() === 0;
const nobody = 65534;
const variables = ["SANDBOXD_TEST_UNPACK_HELPER", "SANDBOXD_TEST_UNPACK_ADDON"] as const;
const files: NativeFile[] = [
  { name: "sandboxd-exec", bytes: Buffer.from("#!/bin/sh\necho helper\n"), mode: 0o700, variable: variables[0] },
  { name: "sandboxd.node", bytes: Buffer.from("addon"), mode: 0o600, variable: variables[1] },
];

describe("the one-file daemon's unpack directory", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0).reverse()) cleanup();
    for (const name of variables) delete process.env[name];
  });

  /** A new directory (realpath) whose own mode lets anyone through, removed after the test. */
  function base(): string {
    const directory = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-unpack-")));
    chmodSync(directory, 0o755);
    cleanups.push(() => rmSync(directory, { recursive: true, force: true }));
    return directory;
  }

  it("refuses a directory other users may rename entries in, or one below such a directory, and writes nothing", () => {
    const open = path.join(base(), "open");
    mkdirSync(open);
    chmodSync(open, 0o777);
    expect(() => unpackInto(open, files)).toThrow(
      `unpack directory ${open} (SANDBOXD_UNPACK_DIR): ${open} has mode 0777: other users could swap the native files the daemon runs`,
    );
    const inner = path.join(open, "inner");
    mkdirSync(inner, { mode: 0o700 });
    expect(() => unpackInto(inner, files)).toThrow(`${open} has mode 0777`);
    const groupWritable = path.join(base(), "group");
    mkdirSync(groupWritable);
    chmodSync(groupWritable, 0o770);
    expect(() => unpackInto(groupWritable, files)).toThrow("has mode 0770");
    expect(readdirSync(open)).toEqual(["inner"]);
    expect(readdirSync(inner)).toEqual([]);
    expect(process.env[variables[0]]).toBeUndefined();
  });

  it.skipIf(!isRoot)(
    "refuses a directory that belongs to another user, who may rename entries whatever its mode",
    () => {
      const theirs = path.join(base(), "theirs");
      mkdirSync(theirs, { mode: 0o755 });
      chownSync(theirs, nobody, nobody);
      expect(() => unpackInto(theirs, files)).toThrow(
        `${theirs} belongs to uid ${nobody}, who could swap the native files the daemon runs`,
      );
      // What it would have allowed: the owner moves the daemon's directory away and puts one of their own in its place.
      expect(readdirSync(theirs)).toEqual([]);
    },
  );

  it.skipIf(!isRoot)(
    "unpacks under a sticky directory (as /tmp) into a private one that another user can neither move nor enter",
    () => {
      const sticky = path.join(base(), "sticky");
      mkdirSync(sticky);
      chmodSync(sticky, 0o1777);
      const link = path.join(base(), "link");
      symlinkSync(sticky, link);
      const directory = unpackInto(link, files);
      cleanups.push(() => rmSync(directory, { recursive: true, force: true }));
      // The link is resolved once: the files live below the real directory, whatever the link points at later.
      expect(path.dirname(directory)).toBe(sticky);
      expect(statSync(directory).mode & 0o7777).toBe(0o700);
      expect(process.env[variables[0]]).toBe(path.join(directory, "sandboxd-exec"));
      expect(statSync(process.env[variables[0]]!).mode & 0o777).toBe(0o700);
      expect(readFileSync(process.env[variables[1]]!, "utf8")).toBe("addon");
      const asNobody = (script: string) =>
        spawnSync("setpriv", [`--reuid=${nobody}`, `--regid=${nobody}`, "--clear-groups", "sh", "-c", script], {
          encoding: "utf8",
        });
      const moved = asNobody(`mv ${directory} ${sticky}/moved`);
      expect(moved.status).not.toBe(0);
      expect(moved.stderr).toContain("Operation not permitted");
      expect(asNobody(`ls ${directory}`).status).not.toBe(0);
      expect(readdirSync(sticky)).toEqual([path.basename(directory)]);
    },
  );
});
