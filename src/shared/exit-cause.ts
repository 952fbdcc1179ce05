import {
  ExitCause as ProtoExitCause,
  KillOrigin as ProtoKillOrigin,
  StartStage as ProtoStartStage,
} from "../../gen/sandbox/v1/sandbox_pb.js";

/**
 * ExitCause says why a process ended: `exited` (on its own, with a code), `signaled` (by a signal the
 * daemon did not send), `killed_on_request`, `timed_out`, `out_of_memory` (the kernel, from the
 * command's own memory cgroup), `daemon_shutdown`, `start_failed` or `unknown`. The names are
 * sandbox.proto's `ExitCause` values in lower case, without their prefix.
 */
export type ExitCause = Lowercase<Exclude<keyof typeof ProtoExitCause, "UNSPECIFIED">>;

/** StartStage names the step of a start that failed: sandbox.proto's `StartStage` values in lower case. */
export type StartStage = Lowercase<Exclude<keyof typeof ProtoStartStage, "UNSPECIFIED">>;

/** KillOrigin names what asked for a kill: sandbox.proto's `KillOrigin` values in lower case. */
export type KillOrigin = Lowercase<Exclude<keyof typeof ProtoKillOrigin, "UNSPECIFIED">>;

/** Every {@link ExitCause}, in the proto's order. */
export const exitCauses: readonly ExitCause[] = namesOf(ProtoExitCause) as ExitCause[];

/** The protobuf enum value of a cause. */
export function exitCauseToProto(cause: ExitCause): ProtoExitCause {
  return ProtoExitCause[cause.toUpperCase() as Uppercase<ExitCause>];
}

/** The cause of a protobuf enum value, or undefined for `UNSPECIFIED` (an older daemon) and values this build does not know. */
export function exitCauseFromProto(value: ProtoExitCause): ExitCause | undefined {
  return nameOf(ProtoExitCause, value) as ExitCause | undefined;
}

/** The protobuf enum value of a start stage. */
export function startStageToProto(stage: StartStage): ProtoStartStage {
  return ProtoStartStage[stage.toUpperCase() as Uppercase<StartStage>];
}

/** The start stage of a protobuf enum value, or undefined for `UNSPECIFIED` and unknown values. */
export function startStageFromProto(value: ProtoStartStage): StartStage | undefined {
  return nameOf(ProtoStartStage, value) as StartStage | undefined;
}

/** The protobuf enum value of a kill origin. */
export function killOriginToProto(origin: KillOrigin): ProtoKillOrigin {
  return ProtoKillOrigin[origin.toUpperCase() as Uppercase<KillOrigin>];
}

/** The kill origin of a protobuf enum value, or undefined for `UNSPECIFIED` and unknown values. */
export function killOriginFromProto(value: ProtoKillOrigin): KillOrigin | undefined {
  return nameOf(ProtoKillOrigin, value) as KillOrigin | undefined;
}

/**
 * Words for a cause, as the CLI and log readers show it ("killed for memory"), with the detail where
 * it adds something ("killed on request (kill_process)", "start failed at cwd: ENOENT").
 */
export function describeExitCause(
  cause: ExitCause,
  detail: { killOrigin?: KillOrigin; startStage?: StartStage; errno?: string } = {},
): string {
  switch (cause) {
    case "exited":
      return "exited";
    case "signaled":
      return "killed by a signal";
    case "killed_on_request":
      return detail.killOrigin === undefined ? "killed on request" : `killed on request (${detail.killOrigin})`;
    case "timed_out":
      return "timed out";
    case "out_of_memory":
      return "killed for memory";
    case "daemon_shutdown":
      return "killed at daemon shutdown";
    case "start_failed": {
      const where = detail.startStage === undefined ? "" : ` at ${detail.startStage}`;
      return `failed to start${where}${detail.errno ? `: ${detail.errno}` : ""}`;
    }
    case "unknown":
      return "ended for an unknown reason";
  }
}

function namesOf(values: Record<string, string | number>): string[] {
  return Object.values(values)
    .filter((value): value is number => typeof value === "number" && value !== 0)
    .sort((a, b) => a - b)
    .map((value) => String(values[value]).toLowerCase());
}

function nameOf(values: Record<string, string | number>, value: number): string | undefined {
  if (value === 0) return undefined;
  const name = values[value];
  return typeof name === "string" ? name.toLowerCase() : undefined;
}
