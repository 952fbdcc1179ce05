import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { createCallSignal } from "../src/server/call-signal.js";

describe("createCallSignal", () => {
  it("aborts with the call, and leaves no listener on the daemon's shutdown signal once disposed", () => {
    const shutdown = new AbortController();
    for (let i = 0; i < 1000; i++) {
      const call = new AbortController();
      const joined = createCallSignal(call.signal, shutdown.signal);
      if (i % 2 === 0) call.abort(new Error("cancelled"));
      expect(joined.signal.aborted).toBe(i % 2 === 0);
      joined.dispose();
    }
    expect(getEventListeners(shutdown.signal, "abort")).toHaveLength(0);
  });

  it("aborts every live call when the daemon shuts down, with the shutdown's reason", () => {
    const shutdown = new AbortController();
    const calls = Array.from({ length: 3 }, () => createCallSignal(new AbortController().signal, shutdown.signal));
    const reason = new Error("shutting down");
    shutdown.abort(reason);
    for (const call of calls) {
      expect(call.signal.aborted).toBe(true);
      expect(call.signal.reason).toBe(reason);
    }
    expect(getEventListeners(shutdown.signal, "abort")).toHaveLength(0);
  });

  it("is already aborted when either signal was", () => {
    const done = new AbortController();
    done.abort();
    expect(createCallSignal(done.signal, new AbortController().signal).signal.aborted).toBe(true);
    expect(createCallSignal(new AbortController().signal, done.signal).signal.aborted).toBe(true);
  });
});
