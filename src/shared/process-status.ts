import { ProcessStatus as ProtoStatus } from "../../gen/sandbox/v1/sandbox_pb.js";

/**
 * ProcessStatus is the lifecycle state of a process: `starting` while spawned, `running`, then
 * `completed` (exit 0), `failed` (non-zero exit), `killed` (ended by a signal: a kill, timeout or
 * cancel) or `error` (could not start). The names are sandbox.proto's `ProcessStatus` values in
 * lower case, without their prefix.
 */
export type ProcessStatus = Lowercase<Exclude<keyof typeof ProtoStatus, "UNSPECIFIED">>;

/** Every {@link ProcessStatus}, in lifecycle order (the proto's order). */
export const processStatuses: readonly ProcessStatus[] = Object.values(ProtoStatus)
  .filter((value): value is ProtoStatus => typeof value === "number" && value !== ProtoStatus.UNSPECIFIED)
  .sort((a, b) => a - b)
  .map((value) => ProtoStatus[value].toLowerCase() as ProcessStatus);

/** The protobuf enum value of a status. */
export function processStatusToProto(status: ProcessStatus): ProtoStatus {
  return ProtoStatus[status.toUpperCase() as Uppercase<ProcessStatus>];
}

/** The status of a protobuf enum value, or undefined for `UNSPECIFIED` and values this build does not know. */
export function processStatusFromProto(value: ProtoStatus): ProcessStatus | undefined {
  if (value === ProtoStatus.UNSPECIFIED) return undefined;
  const name = ProtoStatus[value] as string | undefined;
  return name === undefined ? undefined : (name.toLowerCase() as ProcessStatus);
}
