import { type CgroupCapabilities, favorCgroupMoves } from "../../process/cgroups/index.js";
import {
  groupsOf,
  PidsCgroup,
  reapOrphans,
  reclaimMemoryAsDaemon,
  workspaceProblemFor,
  type OrphanReaping,
} from "../../process/index.js";
import { loadNativeAddon } from "../../process/native/index.js";
import { startServer, type SandboxServer, type SandboxServerOptions, createLogger } from "../../server/index.js";
import { sandboxdVersion } from "../../shared/version.js";
import { parseCommandLine, usage } from "./options.js";
import { exitWithNpmParent } from "./parent-watch.js";

/**
 * Starts the daemon from the command line (`process.argv`) and shuts it down gracefully on SIGTERM or
 * SIGINT. The `sandboxd` command (sandboxd.ts) calls it once the process runs with the daemon's Node flags.
 */
export async function runDaemon(): Promise<void> {
  // The token is read from a copy: out of this process's environment first, it reaches no program
  // the daemon starts, not even those it runs while it reads its flags (getent for --user).
  const environment = { ...process.env };
  delete process.env.SANDBOXD_TOKEN;
  let command;
  try {
    command = parseCommandLine(process.argv.slice(2), environment);
  } catch (error) {
    failToStart((error as Error).message, "sandboxd --help lists the flags", 2);
  }
  // What the delete cannot do: /proc/<pid>/environ still shows the environment the daemon was started
  // with (a token in SANDBOXD_TOKEN among it) to every process of its uid, and so would its memory.
  // Not dumpable, those files belong to root and a command running as the daemon's own user cannot read
  // them; exec gives each command its own dumpable state back.
  loadNativeAddon()?.hideFromSameUser();
  // What the daemon inherited (an fd a shell or supervisor left open) must reach no command: marked
  // close-on-exec here, every command can start without the helper's exec that would close it.
  loadNativeAddon()?.keepInheritedFdsFromCommands?.();
  // Before anything starts: what the commands leave behind (orphans, their zombies) comes back to the
  // daemon, which reaps it, instead of waiting on an init (or on nobody, when the daemon is PID 1).
  const orphans = reapOrphans();
  if (process.argv.some((arg) => arg === "--token" || arg.startsWith("--token="))) {
    process.stderr.write(
      "sandboxd: warning: --token is visible to every local user in the process list; prefer --token-file\n",
    );
  }
  if (command.kind === "help") {
    process.stdout.write(usage);
    return;
  }
  if (command.kind === "version") {
    process.stdout.write(`sandboxd ${sandboxdVersion}\n`);
    return;
  }
  const runAs = command.options.runAs;
  if (runAs !== undefined) {
    const problem = workspaceProblemFor(runAs, groupsOf(runAs), command.options.workspaceRoots ?? [process.cwd()]);
    if (problem !== undefined)
      failToStart(problem, "give that user access (chmod, chown, a group), or choose another --workspace or --user", 2);
  }
  const logger = createLogger({ level: command.logging.level, format: command.logging.format });
  let server: SandboxServer;
  try {
    server = await startServer({ ...command.options, logger, log: (message) => logger.warn(message) });
  } catch (error) {
    const { message, fix } = startFailure(error as NodeJS.ErrnoException, command.options);
    // What was logged before the failure comes before its message.
    logger.flush();
    failToStart(message, fix, 1);
  }
  logger.info(
    { url: server.url, workspace: server.manager.workspace.roots, version: sandboxdVersion },
    `sandboxd ${sandboxdVersion} listening on ${server.url} (workspace ${server.manager.workspace.roots.join(":")})`,
  );
  // Root only: a daemon given cgroups of its own by delegation cannot set the kernel's options anyway.
  if (command.favorCgroupMoves && process.getuid?.() === 0 && server.manager.launcher.usesCgroups) {
    const moves = favorCgroupMoves();
    const text =
      moves.state === "favored"
        ? `favordynmods on (${moves.by === "daemon" ? "turned on now, kernel-wide" : "already"})`
        : `favordynmods off, the first command after a pause waits for the kernel: ${moves.reason}`;
    // Nothing to tell a person when nothing changed.
    const level = moves.state === "favored" && moves.by !== "daemon" ? "debug" : "info";
    logger[level]({ cgroupMoves: moves }, `sandboxd: cgroup moves: ${text}`);
  }
  const { grpc, rest } = server.agentSandboxPorts;
  if (grpc !== undefined || rest !== undefined) {
    const ports = [
      grpc !== undefined ? `process.v1 gRPC on port ${grpc}` : "",
      rest !== undefined ? `REST on port ${rest}` : "",
    ]
      .filter(Boolean)
      .join(", ");
    const trusted = command.options.agentSandbox?.trustedPeers ?? [];
    const without = trusted.length > 0 ? `; without the token from ${trusted.join(", ")} (not this machine)` : "";
    logger.info(
      { agentSandboxPorts: server.agentSandboxPorts },
      `sandboxd: KEP-539.2 (agent-sandbox): ${ports}${without}`,
    );
  }
  // One line on how the daemon is guarded, and each warning on a line of its own.
  const [summary, ...warnings] = securitySummary(command.options, server, orphans).split("; WARNING: ");
  logger.info(`sandboxd: ${summary}`);
  for (const warning of warnings) logger.warn(`sandboxd: ${warning}`);
  // The start-up lines at once (routine lines are held up to 100 ms): whoever started the daemon waits for them.
  logger.flush();
  reclaimMemoryAsDaemon();
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    // Kept listening (not once): a second signal would otherwise take Node's default action and kill
    // the daemon halfway through its shutdown, leaving its commands running. Ctrl-C on `npm start`
    // sends two SIGINTs: the terminal's to the whole group, and the one npm passes on.
    if (stopping) {
      // Debug only: one Ctrl-C on `npm start` is two SIGINTs, and a person pressed the key once.
      logger.debug({ signal }, `sandboxd: ${signal} again, still shutting down`);
      return;
    }
    stopping = true;
    logger.info({ signal }, `sandboxd: ${signal}, shutting down`);
    const forced = setTimeout(() => process.exit(1), 10_000);
    forced.unref();
    void server.close().then(() => process.exit(0));
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  exitWithNpmParent();
}

/**
 * Stops a daemon that cannot start, in one style whatever the reason (a bad flag, a port in use, a
 * workspace its --user cannot enter): `sandboxd: <what>` and `(<the fix>)` on stderr, then exit.
 */
function failToStart(message: string, fix: string, code: number): never {
  process.stderr.write(`sandboxd: ${message}\n(${fix})\n`);
  process.exit(code);
}

/** What a failed listen means, and the flag that fixes it. */
function startFailure(error: NodeJS.ErrnoException, options: SandboxServerOptions): { message: string; fix: string } {
  const failed = error as NodeJS.ErrnoException & { address?: string; port?: number };
  const port = failed.port ?? options.port ?? 7007;
  const address = `${failed.address ?? options.host ?? "127.0.0.1"}:${port}`;
  // The KEP-539.2 listeners have flags of their own.
  const flag = port === (options.port ?? 7007) ? "--port" : "--agent-sandbox-grpc-port or --agent-sandbox-rest-port";
  switch (error.code) {
    case "EADDRINUSE":
      return {
        message: `cannot listen on ${address}: the port is in use (another sandboxd?)`,
        fix: `choose another with ${flag} <n> (0 for any free one), or stop what listens there`,
      };
    case "EACCES":
      return {
        message: `cannot listen on ${address}: permission denied`,
        fix: `ports below 1024 need privileges: choose ${flag} 1024 or above`,
      };
    case "EADDRNOTAVAIL":
      return {
        message: `cannot listen on ${address}: no such address on this machine`,
        fix: "choose an address of this machine with --host, 0.0.0.0 for all",
      };
    default:
      return { message: error.message, fix: "sandboxd --help lists the flags" };
  }
}

/** One line on how the daemon is guarded; never the token itself. */
function securitySummary(options: SandboxServerOptions, server: SandboxServer, orphans: OrphanReaping): string {
  const manager = server.manager;
  const access =
    options.token !== undefined
      ? "bearer token required"
      : options.insecure
        ? "NO TOKEN (--insecure)"
        : "no token (loopback only)";
  const user = options.runAs ? `${options.runAs.name} (uid ${options.runAs.uid})` : "the daemon's user";
  const leftoverTasks = PidsCgroup.leftoverTasksKilled;
  const reaped = [
    manager.reaped
      ? `killed ${manager.reaped.killedGroups.length} process groups left by a previous daemon (state directory)`
      : "",
    leftoverTasks > 0 ? `killed ${leftoverTasks} tasks left in a previous daemon's cgroups` : "",
  ]
    .filter(Boolean)
    .map((text) => `, ${text}`)
    .join("");
  const helper =
    manager.launcher.helper === undefined
      ? "; WARNING: the sandboxd-exec helper was not built (no C compiler at install?): fds this daemon inherited reach commands and a working directory is not re-checked as it is entered"
      : "";
  const addon =
    loadNativeAddon() === null
      ? "; WARNING: the native addon (build/sandboxd.node) is not loaded: commands start with a fork of the daemon (slower), terminal (PTY) commands are refused, freed memory is not trimmed"
      : "";
  const applied = manager.launcher.resources?.applied;
  const resources =
    applied === undefined
      ? "; commands share the daemon's memory and CPU (no writable memory or cpu cgroup)"
      : `; commands: ${applied.memoryBytes !== undefined ? `${Math.round(applied.memoryBytes / 1048576)} MiB of memory together` : "no memory limit"}, ${applied.cpuWeight !== undefined ? `CPU weight ${applied.cpuWeight} of the daemon's` : "no CPU weight"}`;
  const perCommand = perCommandSummary(manager.launcher.resources?.capabilities);
  const sameUser =
    options.token !== undefined && (options.runAs === undefined || options.runAs.uid === process.getuid?.())
      ? "; WARNING: commands run as the daemon's own user: they can signal it, and read the token wherever a process of that user keeps it (the environment of what started the daemon, when it came through SANDBOXD_TOKEN); run commands as another user (--user, the daemon as root)"
      : "";
  const orphaned =
    orphans.state === "reaping"
      ? `; orphans reaped by the daemon${orphans.pid1 ? " (PID 1)" : " (child subreaper)"}`
      : process.pid === 1
        ? `; WARNING: the daemon is PID 1 and cannot reap orphans (${orphans.reason}): their zombies count against the task caps for good; run it under an init (docker run --init, tini)`
        : `; orphans left to init (${orphans.reason})`;
  const forkLimit = manager.launcher.forkLimit(options.runAs?.uid);
  const sharedCount =
    forkLimit === "rlimit-nproc"
      ? "; WARNING: no writable pids cgroup, so the fork cap is RLIMIT_NPROC, which counts every process of the commands' uid together: one command holding many processes stops the others' forks (give the daemon a writable pids controller: docs/OPERATIONS.md, \"Fork caps\")"
      : "";
  const traced =
    forkLimit === "traced"
      ? " (no writable pids cgroup: a supervisor per command traces its forks, so strace and gdb cannot attach inside commands)"
      : "";
  return `${access}; commands run as ${user}; fork cap: ${forkLimit}${traced}${orphaned}${resources}${perCommand}${reaped}${helper}${addon}${sameUser}${sharedCount}`;
}

/**
 * What the daemon can enforce and report of each command from cgroups of its own, in the start
 * line: what it lacks is said too (a limit asked for then is refused, a figure is absent: unknown).
 */
function perCommandSummary(capabilities: CgroupCapabilities | undefined): string {
  if (capabilities === undefined)
    return "; per command: no cgroups of its own (not root, or no writable cgroup filesystem): memory and CPU limits are refused, usage and kills for memory unknown";
  const limits = [capabilities.memoryLimit ? "memory" : "", capabilities.cpuLimit ? "CPU" : ""].filter(Boolean);
  const usage = [
    capabilities.cpuUsage ? "CPU time" : "",
    capabilities.memoryUsage ? "peak memory, kills for memory" : "",
    capabilities.ioUsage ? "block I/O bytes" : "",
  ].filter(Boolean);
  const unknown = [
    capabilities.cpuUsage ? "" : "CPU time",
    capabilities.memoryUsage ? "" : "peak memory, kills for memory",
    capabilities.ioUsage ? "" : "block I/O bytes",
  ].filter(Boolean);
  const tree = {
    "cgroup.kill": "cgroup.kill",
    freeze: "freezing its cgroup, then SIGKILL",
    sweep: "a sweep of its cgroup",
  }[capabilities.treeKill];
  return `; per command: limits ${limits.join(" and ") || "none (no writable memory or cpu controller)"}, usage ${usage.join(", ") || "none"}${unknown.length > 0 ? ` (unknown: ${unknown.join(", ")})` : ""}, tree kill by ${tree}`;
}
