import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { repositoryRoot } from "./support/tools.js";

/** A version as three numbers. */
type Version = [number, number, number];

function parse(text: string): Version {
  const [major = 0, minor = 0, patch = 0] = text
    .replace(/^v/, "")
    .split(".")
    .map((part) => (/^\d+$/.test(part) ? Number(part) : 0));
  return [major, minor, patch];
}

function compare(a: Version, b: Version): number {
  return a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
}

/**
 * Whether `version` satisfies an npm `engines` range of the forms packages use: `*`, `>=x`, `>x`,
 * `<x`, `<=x`, `^x`, `~x`, `x.*`/`x.x`, several in a row (and), alternatives with `||`.
 */
function satisfies(version: Version, range: string): boolean {
  return range.split("||").some((alternative) =>
    alternative
      .trim()
      .replace(/(>=|<=|>|<|\^|~)\s+/g, "$1")
      .split(/\s+/)
      .filter((part) => part !== "")
      .every((comparator) => {
        if (comparator === "*") return true;
        const [, operator = "", text] = /^(>=|<=|>|<|\^|~)?(.*)$/.exec(comparator)!;
        const bound = parse(text);
        // "8.*", "10.x", ">= 10.*": the major as a lower bound with an operator, an equal one without.
        const majorOnly = /^\d+(?:\.[x*])*$/.test(text);
        if (majorOnly && operator === "") return version[0] === bound[0];
        if (/^\d+\.\d+\.[x*]$/.test(text) && operator === "") return version[0] === bound[0] && version[1] === bound[1];
        const order = compare(version, bound);
        switch (operator) {
          case ">=":
            return order >= 0;
          case ">":
            return order > 0;
          case "<=":
            return order <= 0;
          case "<":
            return order < 0;
          case "^":
            return order >= 0 && version[0] === bound[0];
          case "~":
            return order >= 0 && version[0] === bound[0] && version[1] === bound[1];
          default:
            return order === 0;
        }
      }),
  );
}

/** Every package of the lockfile that declares Node versions: name, range, whether only the tests need it. */
function declaredEngines(): { name: string; range: string; dev: boolean }[] {
  const lock = JSON.parse(readFileSync(path.join(repositoryRoot, "package-lock.json"), "utf8")) as {
    packages: Record<
      string,
      { engines?: { node?: string } | string[]; dev?: boolean; optional?: boolean; os?: string[] }
    >;
  };
  return (
    Object.entries(lock.packages)
      .filter(([key, entry]) => key !== "" && !Array.isArray(entry.engines) && entry.engines?.node !== undefined)
      // Packages for other systems (esbuild's, rolldown's...) are never installed here.
      .filter(([, entry]) => entry.os === undefined || entry.os.includes(process.platform))
      .map(([key, entry]) => ({
        name: key.replace(/^.*node_modules\//, ""),
        range: (entry.engines as { node: string }).node,
        dev: entry.dev === true,
      }))
  );
}

const readme = readFileSync(path.join(repositoryRoot, "README.md"), "utf8");
const install = readme.slice(
  readme.indexOf("\n## Install\n"),
  readme.indexOf("\n## ", readme.indexOf("\n## Install\n") + 1),
);

describe("the Node versions the README promises are what the packages declare", () => {
  it("the range parser reads the forms the lockfile has", () => {
    expect(satisfies(parse("20.20.2"), ">=22")).toBe(false);
    expect(satisfies(parse("20.20.2"), "^20.19.0 || >=22.12.0")).toBe(true);
    expect(satisfies(parse("20.12.0"), "^20.19.0 || >=22.12.0")).toBe(false);
    expect(satisfies(parse("20.20.2"), "6.* || 8.* || >= 10.*")).toBe(true);
    expect(satisfies(parse("24.1.0"), "^20.0.0 || ^22.0.0 || >=24.0.0")).toBe(true);
  });

  it("no package the daemon or client needs refuses the README's oldest Node unless the README names it", () => {
    const minimum = /Node (\d+\.\d+) or later/.exec(install)?.[1];
    expect(minimum, "the README states the oldest Node").toBeDefined();
    const refusing = declaredEngines().filter((entry) => !entry.dev && !satisfies(parse(minimum!), entry.range));
    for (const entry of refusing)
      expect(install, `${entry.name} declares ${entry.range}`).toContain(`\`${entry.name}\``);
    expect(refusing.map((entry) => entry.name)).toEqual(["@connectrpc/connect-node"]);
  });

  it(`npm ci on this Node (${process.version}) warns EBADENGINE only for what the README names`, () => {
    const warned = declaredEngines().filter((entry) => !satisfies(parse(process.version), entry.range));
    for (const entry of warned) expect(install, `${entry.name} declares ${entry.range}`).toContain(`\`${entry.name}\``);
  });
});
