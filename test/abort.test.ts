import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { abortableDelay, linkSignals, onAbort, raceSignal } from "../src/shared/abort.js";

describe("linkSignals", () => {
  it("aborts with the first source's reason, and leaves no listener on a long-lived source once disposed or aborted", () => {
    const daemon = new AbortController();
    for (let i = 0; i < 1000; i++) {
      const call = new AbortController();
      const linked = linkSignals(call.signal, daemon.signal);
      if (i % 2 === 0) call.abort(new Error(`cancelled ${i}`));
      expect(linked.signal.aborted).toBe(i % 2 === 0);
      if (i % 2 === 0) expect((linked.signal.reason as Error).message).toBe(`cancelled ${i}`);
      linked.dispose();
    }
    expect(getEventListeners(daemon.signal, "abort")).toHaveLength(0);
  });

  it("aborts every link when a shared source aborts, with its reason, and lets go of the other sources", () => {
    const daemon = new AbortController();
    const calls = Array.from({ length: 3 }, () => new AbortController());
    const links = calls.map((call) => linkSignals(call.signal, daemon.signal));
    const reason = new Error("shutting down");
    daemon.abort(reason);
    for (const [index, link] of links.entries()) {
      expect(link.signal.reason).toBe(reason);
      expect(getEventListeners(calls[index].signal, "abort")).toHaveLength(0);
    }
  });

  it("is already aborted when a source was, skips undefined sources, and aborts on its own", () => {
    const done = new AbortController();
    done.abort("gone");
    expect(linkSignals(undefined, done.signal).signal.reason).toBe("gone");
    const source = new AbortController();
    const own = linkSignals(source.signal, undefined);
    own.abort("mine");
    expect(own.signal.reason).toBe("mine");
    expect(source.signal.aborted).toBe(false);
    expect(getEventListeners(source.signal, "abort")).toHaveLength(0);
  });
});

describe("onAbort", () => {
  it("calls at once for an aborted signal, later for a live one, never after dispose", () => {
    const calls: unknown[] = [];
    const aborted = new AbortController();
    aborted.abort("before");
    onAbort(aborted.signal, (reason) => calls.push(reason));
    expect(calls).toEqual(["before"]);

    const live = new AbortController();
    onAbort(live.signal, (reason) => calls.push(reason));
    const disposed = onAbort(live.signal, (reason) => calls.push(`disposed ${String(reason)}`));
    disposed.dispose();
    live.abort("later");
    expect(calls).toEqual(["before", "later"]);
    expect(getEventListeners(live.signal, "abort")).toHaveLength(0);
  });
});

describe("raceSignal", () => {
  it("settles like the promise and removes its listener, so one signal can race many waits", async () => {
    const daemon = new AbortController();
    for (let i = 0; i < 100; i++) expect(await raceSignal(Promise.resolve(i), daemon.signal)).toBe(i);
    await expect(raceSignal(Promise.reject(new Error("own failure")), daemon.signal)).rejects.toThrow("own failure");
    expect(getEventListeners(daemon.signal, "abort")).toHaveLength(0);
  });

  it("rejects when the signal aborts first, with the reason or the error made of it", async () => {
    const never = new Promise<never>(() => {});
    const first = new AbortController();
    const raced = raceSignal(never, first.signal);
    first.abort(new Error("stop"));
    await expect(raced).rejects.toThrow("stop");
    const second = new AbortController();
    second.abort("why");
    await expect(
      raceSignal(never, second.signal, (reason) => new Error(`cancelled: ${String(reason)}`)),
    ).rejects.toThrow("cancelled: why");
  });
});

describe("abortableDelay", () => {
  it("resolves after the delay, or rejects at the abort and clears its timer", async () => {
    const started = performance.now();
    await abortableDelay(20);
    expect(performance.now() - started).toBeGreaterThanOrEqual(15);
    const controller = new AbortController();
    const waiting = abortableDelay(60_000, controller.signal);
    controller.abort(new Error("no more"));
    await expect(waiting).rejects.toThrow("no more");
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
  });
});

describe("the modules a client shares with the daemon", () => {
  it("abort.ts and limits.ts import nothing, and load without any native module", async () => {
    const { readFileSync } = await import("node:fs");
    const { runCommand, repositoryRoot } = await import("./support/tools.js");
    for (const file of ["src/shared/abort.ts", "src/shared/limits.ts"]) {
      expect(readFileSync(`${repositoryRoot}/${file}`, "utf8")).not.toMatch(/^\s*(import|export .* from)\b/m);
    }
    // Any native addon (node-pty, the daemon's own) is loaded through process.dlopen: make it fail.
    const script = `process.dlopen = () => { throw new Error("a native module was loaded"); };
      const limits = await import("./src/shared/limits.ts");
      const abort = await import("./src/shared/abort.ts");
      console.log(typeof limits.ptySizeProblem, typeof abort.raceSignal);`;
    const result = await runCommand(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script]);
    expect(result.stderr.replace(/^npm warn .*\n/gm, "")).toBe("");
    expect(result.stdout).toBe("function function\n");
  });
});
