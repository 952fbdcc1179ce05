import { describe, expect, it } from "vitest";
import { ProcessError } from "./errors.js";
import { resolveRetention } from "./retention.js";

const limits = { maxOutputBytes: 8 * 1024 * 1024, defaultHeadBytes: 64 * 1024 };

describe("resolveRetention", () => {
  it("gives a request that names nothing the default head and the rest of the limit as tail", () => {
    expect(resolveRetention(undefined, limits)).toEqual({ headBytes: 65_536, tailBytes: 8_388_608 - 131_072 });
    expect(resolveRetention({}, limits)).toEqual(resolveRetention(undefined, limits));
  });

  it("fills in the size a request leaves unset from the other", () => {
    expect(resolveRetention({ headBytes: 1000 }, limits)).toEqual({ headBytes: 1000, tailBytes: 8_388_608 - 2000 });
    expect(resolveRetention({ tailBytes: 1000 }, limits)).toEqual({ headBytes: 65_536, tailBytes: 1000 });
    // A tail that leaves less room than two default heads shrinks the default head.
    expect(resolveRetention({ tailBytes: 8_388_608 - 100 }, limits)).toEqual({
      headBytes: 50,
      tailBytes: 8_388_608 - 100,
    });
    expect(resolveRetention({ headBytes: 0, tailBytes: 0 }, limits)).toEqual({ headBytes: 0, tailBytes: 0 });
  });

  it("uses at most a quarter of a small limit as the default head", () => {
    expect(resolveRetention(undefined, { maxOutputBytes: 4096, defaultHeadBytes: 65_536 })).toEqual({
      headBytes: 1024,
      tailBytes: 2048,
    });
  });

  it("refuses sizes above the limit as RETENTION_ABOVE_LIMIT naming it", () => {
    for (const request of [
      { headBytes: 1000, tailBytes: 8_388_608 - 1999 },
      { tailBytes: 8_388_608 + 1 },
      { headBytes: 4_194_305 },
      { headBytes: Number.MAX_SAFE_INTEGER },
      { headBytes: 2 ** 64 },
    ]) {
      const error = (() => {
        try {
          resolveRetention(request, limits);
        } catch (caught) {
          return caught;
        }
      })();
      expect(error).toBeInstanceOf(ProcessError);
      expect((error as ProcessError).reason).toBe("RETENTION_ABOVE_LIMIT");
      expect((error as ProcessError).metadata).toMatchObject({ limit: "max-output-bytes", value: "8388608" });
    }
    expect(resolveRetention({ headBytes: 1000, tailBytes: 8_388_608 - 2000 }, limits).tailBytes).toBe(8_386_608);
  });

  it("refuses a size that is not a whole number of bytes", () => {
    expect(() => resolveRetention({ headBytes: 1.5 }, limits)).toThrow(/head_bytes must be a whole number/);
    expect(() => resolveRetention({ tailBytes: -1 }, limits)).toThrow(/tail_bytes must be a whole number/);
    expect(() => resolveRetention({ tailBytes: Number.NaN }, limits)).toThrow(/tail_bytes must be a whole number/);
  });
});
