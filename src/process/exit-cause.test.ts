import { describe, expect, it } from "vitest";
import { classifyExit, type ExitFacts } from "./exit-cause.js";

const exitedWith = (code: number): ExitFacts["leader"] => ({ code, signal: null });
const killedBy = (signal: string): ExitFacts["leader"] => ({ code: null, signal });
const facts = (more: Partial<ExitFacts>): ExitFacts => ({ timedOut: false, killedForMemory: undefined, ...more });

describe("classifyExit", () => {
  it("says exited for an exit code, zero or not, and signaled for a signal the daemon did not send", () => {
    expect(classifyExit(facts({ leader: exitedWith(0) }))).toEqual({ cause: "exited" });
    expect(classifyExit(facts({ leader: exitedWith(143) }))).toEqual({ cause: "exited" });
    expect(classifyExit(facts({ leader: killedBy("SIGTERM") }))).toEqual({ cause: "signaled" });
    expect(classifyExit(facts({ leader: killedBy("SIGKILL"), killedForMemory: false }))).toEqual({
      cause: "signaled",
    });
  });

  it("never guesses out of memory from a SIGKILL: only the memory cgroup's count says it", () => {
    expect(classifyExit(facts({ leader: killedBy("SIGKILL"), killedForMemory: undefined })).cause).toBe("signaled");
    expect(classifyExit(facts({ leader: killedBy("SIGKILL"), killedForMemory: true })).cause).toBe("out_of_memory");
    // A build whose compiler was killed for memory exits with a code of its own.
    expect(classifyExit(facts({ leader: exitedWith(2), killedForMemory: true })).cause).toBe("out_of_memory");
    // A command that succeeded anyway (a child it expected to lose) exited.
    expect(classifyExit(facts({ leader: exitedWith(0), killedForMemory: true })).cause).toBe("exited");
    // Memory comes before a timeout or a kill that may have come after it.
    expect(
      classifyExit(facts({ leader: killedBy("SIGKILL"), killedForMemory: true, timedOut: true, killReason: "cancel" }))
        .cause,
    ).toBe("out_of_memory");
  });

  it("says timed out, daemon shutdown or killed on request with its origin for the daemon's own kills", () => {
    expect(classifyExit(facts({ leader: killedBy("SIGKILL"), timedOut: true }))).toEqual({ cause: "timed_out" });
    expect(classifyExit(facts({ leader: killedBy("SIGKILL"), timedOut: true, killReason: "kill_process" }))).toEqual({
      cause: "timed_out",
    });
    expect(classifyExit(facts({ leader: killedBy("SIGTERM"), killReason: "daemon_shutdown" }))).toEqual({
      cause: "daemon_shutdown",
    });
    for (const origin of ["kill_process", "kill_all", "cancel", "disconnect", "deadline"] as const) {
      expect(classifyExit(facts({ leader: killedBy("SIGTERM"), killReason: origin }))).toEqual({
        cause: "killed_on_request",
        killOrigin: origin,
      });
    }
    // A server that exits 0 on SIGTERM was still ended by the request.
    expect(classifyExit(facts({ leader: exitedWith(0), killReason: "kill_process" })).cause).toBe("killed_on_request");
  });

  it("counts a signal sent through SendInput that ended the process as a kill on request", () => {
    const inputSignals = new Set(["SIGINT"]);
    expect(classifyExit(facts({ leader: killedBy("SIGINT"), inputSignals }))).toEqual({
      cause: "killed_on_request",
      killOrigin: "send_input",
    });
    // Another signal ended it: not the one the client sent.
    expect(classifyExit(facts({ leader: killedBy("SIGTERM"), inputSignals })).cause).toBe("signaled");
    // It survived the signal and exited on its own.
    expect(classifyExit(facts({ leader: exitedWith(1), inputSignals })).cause).toBe("exited");
  });

  it("says start failed with the stage and errno, whatever else is known", () => {
    expect(
      classifyExit(
        facts({ startFailure: { stage: "exec", errno: "ENOENT", message: "program not found: nope" }, timedOut: true }),
      ),
    ).toEqual({ cause: "start_failed", startStage: "exec", errno: "ENOENT" });
    expect(
      classifyExit(facts({ leader: killedBy("SIGKILL"), startFailure: { stage: "state", message: "not recorded" } })),
    ).toEqual({ cause: "start_failed", startStage: "state" });
  });

  it("says unknown when the leader's end is not known", () => {
    expect(classifyExit(facts({}))).toEqual({ cause: "unknown" });
    expect(classifyExit(facts({ leader: { code: null, signal: null }, killReason: "kill_all" }))).toEqual({
      cause: "unknown",
    });
  });
});
