// The image's smoke test (test/side/image.sh runs it): runs the built image's root filesystem as a container
// would, from the image's own configuration (entrypoint, user, environment, working directory), with its
// entrypoint as PID 1 of a new PID namespace (unshare + chroot; no container engine runs here), on the host's
// network. Then calls the daemon inside: health over gRPC and HTTP, the image's HEALTHCHECK, Exec as the
// image's unprivileged user, zombie reaping by the init, SIGTERM; and a command that looks for the token in
// every process of the container and tries to signal the daemon and the init, with the token given as
// `docker run -e` gives it (in the init's environment) and as a Kubernetes Secret file.
//   usage: node --import tsx test/side/image/smoke.ts ROOTFS CONFIG_JSON
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chownSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import path from "node:path";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { HealthCheckResponse_ServingStatus, Health } from "../../../gen/grpc/health/v1/health_pb.js";
import { SandboxService } from "../../../gen/sandbox/v1/sandbox_pb.js";
import { waitFor } from "../../support/processes.js";
import { collectExec } from "../../support/rpc.js";
import { tokenProbeArgs, type TokenProbeReport } from "../../support/token-probe.js";

/** The parts of an image's Docker configuration (`buildah inspect --type image IMAGE (.Docker.config)`) used here. */
interface ImageConfig {
  User?: string;
  Env?: string[];
  WorkingDir?: string;
  Entrypoint?: string[];
  Cmd?: string[];
  Healthcheck?: { Test?: string[] };
}

const [rootfs, configFile] = process.argv.slice(2);
const config = JSON.parse(readFileSync(configFile, "utf8")) as ImageConfig;
let passed = 0;
let failed = 0;

function check(name: string, ok: boolean, detail = ""): void {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? "ok" : "FAILED"} - ${name}${ok || detail === "" ? "" : `: ${detail}`}`);
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * The argv that runs `argv` in the image as `user`, with the image's environment plus `env`, in its working
 * directory: a new PID and mount namespace (the command is PID 1), /dev and /proc mounted, chroot.
 */
function inContainer(user: string, env: Record<string, string>, argv: string[]): string[] {
  const environment = new Map(
    (config.Env ?? []).map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]),
  );
  for (const [name, value] of Object.entries(env)) environment.set(name, value);
  const assignments = [...environment].map(([name, value]) => `${name}=${value}`);
  const mountAndEnter =
    'mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec chroot --userspec="$1" "$0" "${@:2}"';
  return [
    "unshare",
    "--pid",
    "--fork",
    "--mount",
    "--propagation",
    "private",
    "--",
    "bash",
    "-c",
    mountAndEnter,
    rootfs,
    user,
    "/usr/bin/env",
    "-i",
    ...assignments,
    "/bin/sh",
    "-c",
    'cd "$0" && exec "$@"',
    config.WorkingDir || "/",
    ...argv,
  ];
}

/** A daemon started from the image's entrypoint, its log, and the host pid of its PID 1. */
interface Container {
  child: ChildProcess;
  url: string;
  log: string[];
  exit: Promise<number | null>;
  /** The host pid of the container's PID 1 (the image's init). */
  init(): number;
}

async function startContainer(user: string, env: Record<string, string>, args: string[]): Promise<Container> {
  const argv = inContainer(user, env, [...(config.Entrypoint ?? []), ...(config.Cmd ?? []), ...args]);
  const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
  const log: string[] = [];
  child.stdout!.setEncoding("utf8").on("data", (text: string) => log.push(text));
  child.stderr!.setEncoding("utf8").on("data", (text: string) => log.push(text));
  const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const url = await waitFor(
    () => {
      if (child.exitCode !== null) throw new Error(`the container exited (${child.exitCode}):\n${log.join("")}`);
      for (const line of log.join("").split("\n")) {
        try {
          const record = JSON.parse(line) as { url?: string };
          if (record.url !== undefined) return record.url;
        } catch {
          // Not (yet) a whole JSON line.
        }
      }
      return undefined;
    },
    { timeoutMs: 30_000, what: "the daemon in the image to listen" },
  );
  const init = () => Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, "utf8").trim().split(" ")[0]);
  return { child, url: url!, log, exit, init };
}

/** Sends SIGTERM to the container's init, as `docker stop` does, and checks the daemon drains and exits 0. */
async function stop(container: Container, label: string): Promise<void> {
  process.kill(container.init(), "SIGTERM");
  const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), 15_000).unref());
  const code = await Promise.race([container.exit, timeout]);
  if (code === "timeout") container.child.kill("SIGKILL");
  const logged = container.log.join("").includes("SIGTERM, shutting down");
  check(
    `${label}: SIGTERM to the init reaches the daemon, which exits 0`,
    code === 0 && logged,
    `exit ${code}, logged ${logged}`,
  );
}

function client(url: string, token: string) {
  const sessionManager = new Http2SessionManager(url);
  const bearer: Interceptor = (next) => (request) => (
    request.header.set("authorization", `Bearer ${token}`), next(request)
  );
  const transport = createGrpcTransport({ baseUrl: url, sessionManager, interceptors: [bearer] });
  return {
    sandbox: createClient(SandboxService, transport),
    health: createClient(Health, transport),
    close: () => sessionManager.abort(),
  };
}

async function text(
  command: string,
  rpc: ReturnType<typeof client>,
): Promise<{ stdout: string; stderr: string; exitCode?: number }> {
  const result = await collectExec(rpc.sandbox, { command, timeoutMs: 20_000 });
  return { stdout: result.stdout.toString(), stderr: result.stderr.toString(), exitCode: result.exited.exitCode };
}

/** The uid and gid of `name` in the image's password database. */
function imageUser(name: string): { uid: number; gid: number } {
  const entry = readFileSync(path.join(rootfs, "etc/passwd"), "utf8")
    .split("\n")
    .find((line) => line.startsWith(`${name}:`));
  const [, , uid, gid] = (entry ?? "").split(":");
  return { uid: Number(uid), gid: Number(gid) };
}

/**
 * Runs the token probe (test/support/token-probe.ts) as a command and checks that it finds the token in no
 * process of the container (environ, cmdline, memory it may read) and that the kernel refuses it every signal
 * to the daemon and to the init above it.
 */
async function checkTokenHidden(label: string, token: string, rpc: ReturnType<typeof client>): Promise<void> {
  const result = await collectExec(rpc.sandbox, { command: "node", args: tokenProbeArgs(token), timeoutMs: 60_000 });
  let report: TokenProbeReport | undefined;
  try {
    report = JSON.parse(result.stdout.toString()) as TokenProbeReport;
  } catch {
    check(`${label}: the token probe ran`, false, `${result.stdout.toString()}${result.stderr.toString()}`);
    return;
  }
  check(
    `${label}: a command finds the token in no process's environ, cmdline or memory (${report.processes} processes)`,
    report.found.length === 0 && report.processes >= 2,
    JSON.stringify(report),
  );
  const chain = report.ancestors.map((process) => `${process.name}:${process.signal}`).join(" ");
  check(
    `${label}: a command cannot signal the daemon nor the init (${chain})`,
    report.ancestors.length === 2 &&
      // The daemon's comm: "node", or "MainThread" from Node 24 on (it names its main thread).
      ["node", "MainThread"].includes(report.ancestors[0]!.name) &&
      report.ancestors[1]!.pid === 1 &&
      report.ancestors.every((process) => process.signal === "EPERM"),
    JSON.stringify(report.ancestors),
  );
}

/** The image as it is run by default: root, commands as `sandbox`, the token in the environment as `docker run -e` puts it. */
async function defaultImage(): Promise<void> {
  const sandbox = imageUser("sandbox");
  const [uid] = (config.User ?? "").split(":");
  const env = new Map(
    (config.Env ?? []).map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]),
  );
  check(
    "the daemon and its init run as root, commands as sandbox (SANDBOXD_USER)",
    Number(uid) === 0 && sandbox.uid > 0 && [String(sandbox.uid), "sandbox"].includes(env.get("SANDBOXD_USER") ?? ""),
    `User ${config.User}, SANDBOXD_USER ${env.get("SANDBOXD_USER")}`,
  );
  const token = `image-${process.pid}-${Date.now()}`;
  const port = await freePort();
  const container = await startContainer(
    config.User ?? "0:0",
    { SANDBOXD_PORT: String(port), SANDBOXD_TOKEN: token },
    [],
  );
  const rpc = client(container.url, token);
  try {
    check(
      "the daemon listens on all addresses at SANDBOXD_PORT",
      container.url === `http://0.0.0.0:${port}` || container.url.endsWith(`:${port}`),
      container.url,
    );
    // The start-up lines after the first one may still be on their way when the daemon answers.
    await waitFor(() => container.log.join("").includes("commands run as sandbox"), {
      what: "the start line naming the commands' user",
    }).catch(() => {});
    const log = container.log.join("");
    // Other warnings may stand (no writable pids cgroup in a container: the shared RLIMIT_NPROC one).
    check(
      "the native helper and addon are in the image",
      !/WARNING: the (sandboxd-exec helper|native addon)/.test(log),
      log,
    );
    check("the daemon says commands run as sandbox", log.includes("commands run as sandbox"), log);

    const healthz = await fetch(`http://127.0.0.1:${port}/healthz`);
    const readyz = await fetch(`http://127.0.0.1:${port}/readyz`);
    check(
      "GET /healthz and /readyz answer 200",
      healthz.status === 200 && readyz.status === 200,
      `${healthz.status} ${readyz.status}`,
    );
    const health = await rpc.health.check({ service: "sandbox.v1.SandboxService" });
    check(
      "grpc.health.v1 Check answers SERVING",
      health.status === HealthCheckResponse_ServingStatus.SERVING,
      String(health.status),
    );

    const probe = config.Healthcheck?.Test ?? [];
    const probeArgv = inContainer(config.User ?? "0:0", { SANDBOXD_PORT: String(port) }, probe.slice(1));
    const result = spawnSync(probeArgv[0], probeArgv.slice(1), { encoding: "utf8", timeout: 20_000 });
    check(
      "the image's HEALTHCHECK passes",
      probe[0] === "CMD" && result.status === 0,
      `${JSON.stringify(probe)} exit ${result.status}: ${result.stderr}`,
    );

    const who = await text(
      "id -u; id -g; id -un; echo $HOME; pwd; test -w . && echo workspace-writable; test -w /opt/sandboxd/dist || echo daemon-read-only",
      rpc,
    );
    check(
      "Exec runs as sandbox in /workspace, which it may write, and not the daemon's files",
      who.stdout ===
        `${sandbox.uid}\n${sandbox.gid}\nsandbox\n/home/sandbox\n/workspace\nworkspace-writable\ndaemon-read-only\n` &&
        who.exitCode === 0,
      JSON.stringify(who),
    );
    const streams = await text("echo out; echo err >&2; exit 7", rpc);
    check(
      "Exec streams stdout and stderr and reports the exit code",
      streams.stdout === "out\n" && streams.stderr === "err\n" && streams.exitCode === 7,
      JSON.stringify(streams),
    );

    const refused = await collectExec(client(container.url, "wrong").sandbox, { command: "true" }).then(
      () => undefined,
      (error: unknown) => ConnectError.from(error),
    );
    check("a wrong token is refused with UNAUTHENTICATED", refused?.code === Code.Unauthenticated, String(refused));

    await checkTokenHidden("token in the environment", token, rpc);
    const after = await text("echo still serving", rpc);
    check("the daemon serves on after the attempts", after.stdout === "still serving\n", JSON.stringify(after));

    // A process in a session of its own, left behind by its command, is re-parented to the daemon (a child
    // subreaper), which must reap it when it ends (it may end it with its command); tini, PID 1, reaps the rest.
    const orphan = await text("setsid sleep 1 </dev/null >/dev/null 2>&1 & echo $!", rpc);
    const pid = Number(orphan.stdout.trim());
    // Gone from /proc once reaped; a zombie would stay, with state Z.
    const state = `cat /proc/${pid}/stat 2>/dev/null | sed 's/.*) \\(.\\).*/\\1/'; tr '\\0' ' ' </proc/1/cmdline`;
    const seen = (await text(state, rpc)).stdout;
    let last = seen;
    const reaped = await waitFor(async () => ((last = (await text(state, rpc)).stdout), !/^[A-Z]\n/.test(last)), {
      timeoutMs: 8_000,
      intervalMs: 100,
    }).catch(() => false);
    check(
      "PID 1 is the image's init, and orphans are reaped",
      pid > 0 && reaped === true && last.startsWith("/usr/bin/tini "),
      `orphan ${pid} was ${JSON.stringify(seen)}, then ${JSON.stringify(last)}`,
    );
  } catch (error) {
    check("the default container answered", false, `${String(error)}\n${container.log.join("")}`);
  } finally {
    rpc.close();
    await stop(container, "default");
  }
}

/** The image as the Kubernetes manifest runs it: the token in a root-only file, as a Secret is mounted, and nowhere in the environment. */
async function tokenFile(): Promise<void> {
  const token = `image-file-${process.pid}-${Date.now()}`;
  writeFileSync(path.join(rootfs, "run/sandboxd-token"), token, { mode: 0o400 });
  chownSync(path.join(rootfs, "run/sandboxd-token"), 0, 0);
  const port = await freePort();
  let container: Container;
  try {
    container = await startContainer(
      config.User ?? "0:0",
      { SANDBOXD_PORT: String(port), SANDBOXD_TOKEN_FILE: "/run/sandboxd-token" },
      [],
    );
  } catch (error) {
    check("the token-file container started", false, String(error));
    return;
  }
  const rpc = client(container.url, token);
  try {
    const who = await text("id -un; cat /run/sandboxd-token", rpc);
    check(
      "with a token file: commands run as sandbox and cannot read the file",
      who.stdout === "sandbox\n" && who.exitCode !== 0 && who.stderr.includes("Permission denied"),
      JSON.stringify(who),
    );
    await checkTokenHidden("token file", token, rpc);
  } catch (error) {
    check("the token-file container answered", false, `${String(error)}\n${container.log.join("")}`);
  } finally {
    rpc.close();
    await stop(container, "token file");
  }
}

await defaultImage();
await tokenFile();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
