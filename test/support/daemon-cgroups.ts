import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { SandboxService } from "../../gen/sandbox/v1/sandbox_pb.js";
import { daemonFromSource, startDaemonProcess, type DaemonProcess } from "./daemon-process.js";
import { waitFor } from "./processes.js";
import type { SandboxClient } from "./rpc.js";

/** Whether `unshare --pid --fork --mount-proc` works here (root, and a kernel that allows it). */
export const canUnsharePid =
  process.getuid?.() === 0 && spawnSync("unshare", ["--pid", "--fork", "--mount-proc", "true"]).status === 0;

/** The arguments that run a daemon as PID 1 of a new pid namespace (killed with `unshare` itself). */
export const asPidOne = ["unshare", "--pid", "--kill-child", "--mount-proc"];

/** The pid of the one child of `pid` (the daemon under `unshare --fork`), or undefined while there is none. */
export function onlyChild(pid: number): number | undefined {
  try {
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean);
    return children.length === 1 ? Number(children[0]) : undefined;
  } catch {
    return undefined;
  }
}

/** The zombie children of `pid`, read from /proc. */
export function zombieChildren(pid: number): number[] {
  const zombies: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const [state, parent] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (state === "Z" && Number(parent) === pid) zombies.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return zombies;
}

/**
 * The pids cgroup directories a daemon made for its commands (v1 pids hierarchy), found from the
 * outside by `daemonPid` as this process sees it: they are named after the daemon's pid namespace
 * and its pid there.
 */
export function daemonPidsCgroups(daemonPid: number): string[] {
  const own = /^\d+:pids:(.*)$/m.exec(readFileSync(`/proc/${daemonPid}/cgroup`, "utf8"))?.[1];
  if (own === undefined) return [];
  const namespace = /^pid:\[(\d+)\]$/.exec(readlinkSync(`/proc/${daemonPid}/ns/pid`))?.[1];
  const pidInside = /^NSpid:.*?(\d+)\s*$/m.exec(readFileSync(`/proc/${daemonPid}/status`, "utf8"))?.[1];
  const parent = path.join("/sys/fs/cgroup/pids", own);
  return readdirSync(parent)
    .filter((name) => name.startsWith(`sandboxd.${namespace}.${pidInside}.`))
    .map((name) => path.join(parent, name));
}

/** The tasks charged to a pids cgroup (`pids.current`, zombies included). */
export function tasksCharged(directory: string): number {
  return Number(readFileSync(path.join(directory, "pids.current"), "utf8"));
}

/** A daemon process started by {@link startDaemonWithClient}, a client for it, and its pid. */
export interface DaemonWithClient {
  daemon: DaemonProcess;
  client: SandboxClient;
  /** The daemon's pid as this process sees it (under `unshare`, the child of the one started). */
  pid: number;
  /** Kills the daemon (SIGKILL), closes the client and removes the workspace. */
  close(): void;
}

/** Starts a daemon process in a workspace of its own, with `wrapper` (e.g. {@link asPidOne}) before node. */
export async function startDaemonWithClient(
  flags: readonly string[],
  wrapper: readonly string[] = [],
): Promise<DaemonWithClient> {
  const workspace = realpathSync(mkdtempSync(path.join(tmpdir(), "sandboxd-cgroups-")));
  const command =
    wrapper.length === 0
      ? daemonFromSource
      : {
          ...daemonFromSource,
          file: wrapper[0]!,
          args: [...wrapper.slice(1), process.execPath, ...daemonFromSource.args!],
        };
  let started: DaemonProcess;
  try {
    started = await startDaemonProcess(["--workspace", workspace, ...flags], command);
  } catch (error) {
    rmSync(workspace, { recursive: true, force: true });
    throw error;
  }
  const sessionManager = new Http2SessionManager(started.url);
  const close = () => {
    started.child.kill("SIGKILL");
    sessionManager.abort();
    rmSync(workspace, { recursive: true, force: true });
  };
  try {
    const pid =
      wrapper.length === 0
        ? started.child.pid!
        : (await waitFor(() => onlyChild(started.child.pid!), { what: "the daemon under its wrapper" }))!;
    return {
      daemon: started,
      client: createClient(SandboxService, createGrpcTransport({ baseUrl: started.url, sessionManager })),
      pid,
      close,
    };
  } catch (error) {
    close();
    throw error;
  }
}
