import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { repositoryRoot } from "./support/tools.js";

// The architecture, read from the imports of src/ alone (no module is loaded): which layer may import which,
// that a room is entered through its door (index.ts), and that no modules import each other in a circle.

/** One import of a module: what it names, resolved to a path from the repository root when it is ours. */
interface Import {
  /** The module's path (`src/process/index.ts`, `gen/...`), or the package specifier (`@connectrpc/connect`). */
  target: string;
  /** Whether it is a package rather than a file of ours. */
  isPackage: boolean;
  /** Whether only types are imported (`import type`), which leaves nothing at run time. */
  typeOnly: boolean;
}

/** Every module of src/ and its imports, by path from the repository root. */
type ModuleGraph = ReadonlyMap<string, readonly Import[]>;

const statement = /(?:^|[;\n])\s*(import|export)\s+(type\s+)?(?:[\w*{}\s,$]*?\s+from\s+)?["']([^"']+)["']/g;
const dynamicImport = /\bimport\(\s*["']([^"']+)["']\s*\)/g;

function importsOf(file: string, source: string): Import[] {
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
  const found: Import[] = [];
  const add = (specifier: string, typeOnly: boolean) => {
    if (!specifier.startsWith(".")) {
      found.push({ target: specifier, isPackage: true, typeOnly });
      return;
    }
    const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier)).replace(/\.js$/, ".ts");
    found.push({ target: resolved, isPackage: false, typeOnly });
  };
  for (const match of code.matchAll(statement)) add(match[3], match[2] !== undefined);
  for (const match of code.matchAll(dynamicImport)) add(match[1], false);
  return found;
}

function readGraph(): ModuleGraph {
  const graph = new Map<string, Import[]>();
  const walk = (directory: string) => {
    for (const entry of readdirSync(path.join(repositoryRoot, directory), { withFileTypes: true })) {
      const relative = path.posix.join(directory, entry.name);
      if (entry.isDirectory()) walk(relative);
      else if (entry.name.endsWith(".ts"))
        graph.set(relative, importsOf(relative, readFileSync(path.join(repositoryRoot, relative), "utf8")));
    }
  };
  walk("src");
  return graph;
}

/** The layers of src/ and the layers each may import (besides gen/ and itself). */
const mayImport: Readonly<Record<string, readonly string[]>> = {
  shared: [],
  process: ["shared"],
  files: ["process", "shared"],
  server: ["process", "files", "shared"],
  client: ["shared"],
  cli: ["client", "server", "process", "shared"],
};

/** The layers whose rooms (their subdirectories) are entered through a door; cli/ holds programs, shared/ leaves. */
const roomedLayers = ["process", "files", "server", "client"];

/** Packages of the RPC layer: the process and file domains know nothing of RPC. */
const rpcPackage = /^@connectrpc\//;

const layerOf = (file: string) => file.split("/")[1];
const isInside = (file: string, directory: string) => file.startsWith(`${directory}/`);

/** Every rule the graph breaks, one line each (`from -> to: why`). */
function violations(graph: ModuleGraph): string[] {
  const found: string[] = [];
  const doors = new Set(
    [...graph.keys()].filter((file) => file.endsWith("/index.ts")).map((file) => path.posix.dirname(file)),
  );
  for (const [file, imports] of graph) {
    const layer = layerOf(file);
    const allowed = mayImport[layer];
    if (allowed === undefined) {
      found.push(`${file}: in no known layer (add src/${layer} to the layering test's table)`);
      continue;
    }
    for (const { target, isPackage, typeOnly } of imports) {
      if (isPackage) {
        const bare = layer === "process" || layer === "files" || (layer === "shared" && !typeOnly);
        if (bare && rpcPackage.test(target)) found.push(`${file} -> ${target}: ${layer}/ imports no RPC package`);
        continue;
      }
      if (target.startsWith("gen/")) continue;
      if (!target.startsWith("src/")) {
        found.push(`${file} -> ${target}: outside src/ and gen/`);
        continue;
      }
      const targetLayer = layerOf(target);
      if (targetLayer !== layer && !allowed.includes(targetLayer)) {
        found.push(`${file} -> ${target}: ${layer}/ may not import ${targetLayer}/`);
        continue;
      }
      // A room (a directory with an index.ts) is entered through its door, unless the importer is inside it;
      // a room within a room has its own door, which an importer may use to load no more than that room.
      const entered = [...doors].filter((room) => isInside(target, room) && !isInside(file, room));
      if (entered.length > 0 && !entered.some((room) => target === `${room}/index.ts`)) {
        const innermost = entered.reduce((a, b) => (a.length > b.length ? a : b));
        found.push(`${file} -> ${target}: enter ${innermost}/ through its index.ts`);
      }
    }
  }
  return found;
}

/**
 * Every circle of imports. A type-only import counts where it crosses from one directory to another
 * (it says which room depends on which, as the core's handle naming the wrappers' Process type did);
 * within a directory a type may point back (an interface its parts share, declared beside the module
 * that assembles them), since it leaves nothing to load at run time.
 */
function cycles(graph: ModuleGraph): string[][] {
  const found: string[][] = [];
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (file: string) => {
    state.set(file, "open");
    stack.push(file);
    for (const { target, isPackage, typeOnly } of graph.get(file) ?? []) {
      if (isPackage || !graph.has(target)) continue;
      if (typeOnly && path.posix.dirname(target) === path.posix.dirname(file)) continue;
      if (state.get(target) === "open") found.push([...stack.slice(stack.indexOf(target)), target]);
      else if (state.get(target) === undefined) visit(target);
    }
    stack.pop();
    state.set(file, "done");
  };
  for (const file of [...graph.keys()].sort()) if (!state.has(file)) visit(file);
  return found;
}

describe("the layers of src/", () => {
  const graph = readGraph();

  it("reads the imports it judges (the analysis sees the edges the build has)", () => {
    const targets = (file: string) => (graph.get(file) ?? []).map((found) => found.target);
    expect(targets("src/server/server.ts")).toContain("src/process/index.ts");
    expect(targets("src/server/server.ts")).toContain("@connectrpc/connect-node");
    expect(targets("src/cli/sandboxd.ts")).toContain("src/cli/sandboxd/daemon.ts");
    expect(graph.get("src/process/errors.ts")).toContainEqual({
      target: "src/shared/error-reasons.ts",
      isPackage: false,
      typeOnly: true,
    });
  });

  it("import only the layers they may: client and process never server, client never process, shared nothing", () => {
    expect(violations(graph)).toEqual([]);
  });

  it("have one door each: every layer that others import, and every room within it, has an index.ts", () => {
    const directories = new Set([...graph.keys()].map((file) => path.posix.dirname(file)));
    const rooms = [...directories].filter((directory) => {
      const [, layer, room] = directory.split("/");
      return roomedLayers.includes(layer) && room !== undefined && directory === `src/${layer}/${room}`;
    });
    const missing = [...roomedLayers.map((layer) => `src/${layer}`), ...rooms].filter(
      (room) => directories.has(room) && !graph.has(`${room}/index.ts`),
    );
    expect(missing).toEqual([]);
  });

  it("have no circle of imports: the client's wrappers depend on its core, never the reverse", () => {
    expect(cycles(graph).map((circle) => circle.join(" -> "))).toEqual([]);
  });

  it("would catch a circle through a type that crosses rooms, and let a type point back within one", () => {
    const edge = (target: string, typeOnly: boolean) => ({ target, isPackage: false, typeOnly });
    const crossing: ModuleGraph = new Map([
      ["src/client/core/handle.ts", [edge("src/client/wrappers/views.ts", true)]],
      ["src/client/wrappers/views.ts", [edge("src/client/core/handle.ts", false)]],
    ]);
    expect(cycles(crossing)).toEqual([
      ["src/client/core/handle.ts", "src/client/wrappers/views.ts", "src/client/core/handle.ts"],
    ]);
    const within: ModuleGraph = new Map([
      ["src/files/all.ts", [edge("src/files/part.ts", false)]],
      ["src/files/part.ts", [edge("src/files/all.ts", true)]],
    ]);
    expect(cycles(within)).toEqual([]);
  });

  it("would catch a client importing the process manager, a domain importing RPC, and a room entered sideways", () => {
    const broken: ModuleGraph = new Map([
      ["src/client/core/x.ts", [{ target: "src/process/index.ts", isPackage: false, typeOnly: false }]],
      ["src/process/x.ts", [{ target: "@connectrpc/connect", isPackage: true, typeOnly: false }]],
      ["src/shared/x.ts", [{ target: "src/server/index.ts", isPackage: false, typeOnly: true }]],
      ["src/server/x.ts", [{ target: "src/server/rpc/errors.ts", isPackage: false, typeOnly: false }]],
      ["src/server/rpc/index.ts", []],
      ["src/server/rpc/errors.ts", []],
    ]);
    expect(violations(broken)).toEqual([
      "src/client/core/x.ts -> src/process/index.ts: client/ may not import process/",
      "src/process/x.ts -> @connectrpc/connect: process/ imports no RPC package",
      "src/shared/x.ts -> src/server/index.ts: shared/ may not import server/",
      "src/server/x.ts -> src/server/rpc/errors.ts: enter src/server/rpc/ through its index.ts",
    ]);
  });
});
