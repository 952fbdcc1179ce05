import { describe, expect, it } from "vitest";
import { commonLevel } from "./retained-output-budget.js";

describe("commonLevel", () => {
  it("trims the largest buffers down to one level that gives up at least the excess", () => {
    // 10 and 6 down to 5 give up 5 + 1 = 6; the 2 stays.
    expect(commonLevel([10, 6, 2], 6)).toBe(5);
    // A chatty buffer loses its oldest output before a quiet one loses any.
    expect(commonLevel([100, 10], 50)).toBe(50);
    // Everything must go: level 0.
    expect(commonLevel([4, 3], 7)).toBe(0);
    expect(commonLevel([4, 3], 100)).toBe(0);
    // Nothing to give up: the largest stays as it is.
    expect(commonLevel([8, 1], 0)).toBe(8);
  });

  it("never leaves more than the sizes minus the excess", () => {
    for (const sizes of [[9, 9, 9], [50, 20, 20, 1], [7]]) {
      for (let excess = 0; excess <= sizes.reduce((a, b) => a + b, 0); excess++) {
        const level = commonLevel(sizes, excess);
        const kept = sizes.reduce((sum, size) => sum + Math.min(size, level), 0);
        expect(kept, `${sizes} excess ${excess}`).toBeLessThanOrEqual(sizes.reduce((a, b) => a + b, 0) - excess);
      }
    }
  });
});
