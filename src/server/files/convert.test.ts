import { create, equals, toBinary, toJson } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { FileInfoSchema, FileType } from "../../../gen/sandbox/v1/files_pb.js";
import type { FileStat } from "../../files/index.js";
import { toProtoFileInfo } from "./convert.js";

const file: FileStat = {
  path: "/src/main.ts",
  name: "main.ts",
  kind: "file",
  sizeBytes: 2 ** 40 + 3,
  mode: 0o644,
  uid: 1000,
  gid: 1000,
  owner: "dev",
  group: "dev",
  modifiedSeconds: 1_795_000_000,
  modifiedNanos: 123_456_789,
};

describe("toProtoFileInfo", () => {
  it("builds the message create() would, field for field, on the wire and in JSON", () => {
    for (const stat of [file, { ...file, name: "link", kind: "symlink" as const, symlinkTarget: "main.ts" }]) {
      const built = toProtoFileInfo(stat);
      const made = create(FileInfoSchema, {
        path: stat.path,
        name: stat.name,
        type: stat.kind === "file" ? FileType.FILE : FileType.SYMLINK,
        sizeBytes: BigInt(stat.sizeBytes),
        mode: stat.mode,
        uid: stat.uid,
        gid: stat.gid,
        owner: stat.owner,
        group: stat.group,
        modifiedTime: create(TimestampSchema, { seconds: BigInt(stat.modifiedSeconds), nanos: stat.modifiedNanos }),
        symlinkTarget: stat.symlinkTarget,
      });
      expect(equals(FileInfoSchema, built, made)).toBe(true);
      expect(toBinary(FileInfoSchema, built)).toEqual(toBinary(FileInfoSchema, made));
      expect(toJson(FileInfoSchema, built)).toEqual(toJson(FileInfoSchema, made));
      expect("symlinkTarget" in built).toBe(stat.symlinkTarget !== undefined);
    }
  });
});
