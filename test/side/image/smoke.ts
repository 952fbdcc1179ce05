// The image's smoke test (test/side/image.sh runs it): runs the built image's root filesystem as a container
// would, from the image's own configuration (entrypoint, user, environment, working directory), with its
// entrypoint as PID 1 of a new PID namespace (unshare + chroot; no container engine runs here), on the host's
// network. Then calls the daemon inside: health over gRPC and HTTP, the image's HEALTHCHECK, Exec as the
// image's unprivileged user, zombie reaping by the init, SIGTERM; and again as root with --user.
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
  const environment = new Map((config.Env ?? []).map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]));
  for (const [name, value] of Object.entries(env)) environment.set(name, value);
  const assignments = [...environment].map(([name, value]) => `${name}=${value}`);
  const mountAndEnter = 'mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec chroot --userspec="$1" "$0" "${@:2}"';
  return [
    "unshare", "--pid", "--fork", "--mount", "--propagation", "private", "--",
    "bash", "-c", mountAndEnter, rootfs, user,
    "/usr/bin/env", "-i", ...assignments,
    "/bin/sh", "-c", 'cd "$0" && exec "$@"', config.WorkingDir || "/", ...argv,
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
  check(`${label}: SIGTERM to the init reaches the daemon, which exits 0`, code === 0 && logged, `exit ${code}, logged ${logged}`);
}

function client(url: string, token: string) {
  const sessionManager = new Http2SessionManager(url);
  const bearer: Interceptor = (next) => (request) => (request.header.set("authorization", `Bearer ${token}`), next(request));
  const transport = createGrpcTransport({ baseUrl: url, sessionManager, interceptors: [bearer] });
  return { sandbox: createClient(SandboxService, transport), health: createClient(Health, transport), close: () => sessionManager.abort() };
}

async function text(command: string, rpc: ReturnType<typeof client>): Promise<{ stdout: string; stderr: string; exitCode?: number }> {
  const result = await collectExec(rpc.sandbox, { command, timeoutMs: 20_000 });
  return { stdout: result.stdout.toString(), stderr: result.stderr.toString(), exitCode: result.exited.exitCode };
}

/** The image as it is run by default: its own user, token from a 0600 file of that user. */
async function defaultUser(): Promise<void> {
  const [uid, gid] = (config.User ?? "").split(":");
  check("the image runs as a non-root user by default", config.User !== undefined && Number(uid) > 0, `User ${config.User}`);
  const token = `image-${process.pid}`;
  writeFileSync(path.join(rootfs, "run/sandboxd-token"), token, { mode: 0o600 });
  chownSync(path.join(rootfs, "run/sandboxd-token"), Number(uid), Number(gid ?? uid));
  const port = await freePort();
  const container = await startContainer(config.User!, { SANDBOXD_PORT: String(port), SANDBOXD_TOKEN_FILE: "/run/sandboxd-token" }, []);
  const rpc = client(container.url, token);
  try {
    check("the daemon listens on all addresses at SANDBOXD_PORT", container.url === `http://0.0.0.0:${port}` || container.url.endsWith(`:${port}`), container.url);
    const log = container.log.join("");
    check("the native helper and addon are in the image", !log.includes("WARNING"), log);

    const healthz = await fetch(`http://127.0.0.1:${port}/healthz`);
    const readyz = await fetch(`http://127.0.0.1:${port}/readyz`);
    check("GET /healthz and /readyz answer 200", healthz.status === 200 && readyz.status === 200, `${healthz.status} ${readyz.status}`);
    const health = await rpc.health.check({ service: "sandbox.v1.SandboxService" });
    check("grpc.health.v1 Check answers SERVING", health.status === HealthCheckResponse_ServingStatus.SERVING, String(health.status));

    const probe = config.Healthcheck?.Test ?? [];
    const probeArgv = inContainer(config.User!, { SANDBOXD_PORT: String(port) }, probe.slice(1));
    const result = spawnSync(probeArgv[0], probeArgv.slice(1), { encoding: "utf8", timeout: 20_000 });
    check("the image's HEALTHCHECK passes", probe[0] === "CMD" && result.status === 0, `${JSON.stringify(probe)} exit ${result.status}: ${result.stderr}`);

    const who = await text("id -u; id -g; pwd; test -w . && echo workspace-writable; test -w /opt/sandboxd/dist || echo daemon-read-only", rpc);
    check("Exec runs as the image's user in /workspace, which it may write, and not the daemon's files",
      who.stdout === `${uid}\n${gid ?? uid}\n/workspace\nworkspace-writable\ndaemon-read-only\n` && who.exitCode === 0, JSON.stringify(who));
    const streams = await text("echo out; echo err >&2; exit 7", rpc);
    check("Exec streams stdout and stderr and reports the exit code", streams.stdout === "out\n" && streams.stderr === "err\n" && streams.exitCode === 7, JSON.stringify(streams));

    const refused = await collectExec(client(container.url, "wrong").sandbox, { command: "true" }).then(() => undefined, (error: unknown) => ConnectError.from(error));
    check("a wrong token is refused with UNAUTHENTICATED", refused?.code === Code.Unauthenticated, String(refused));

    // A process in a session of its own, left behind by its command, is re-parented to PID 1, which must reap it
    // when it ends (the daemon may end it with its command). Without an init (node as PID 1) it stays a zombie.
    const orphan = await text("setsid sleep 1 </dev/null >/dev/null 2>&1 & echo $!", rpc);
    const pid = Number(orphan.stdout.trim());
    // Gone from /proc once reaped; a zombie would stay, with state Z.
    const state = `cat /proc/${pid}/stat 2>/dev/null | sed 's/.*) \\(.\\).*/\\1/'; tr '\\0' ' ' </proc/1/cmdline`;
    const seen = (await text(state, rpc)).stdout;
    let last = seen;
    const reaped = await waitFor(async () => ((last = (await text(state, rpc)).stdout), !/^[A-Z]\n/.test(last)), { timeoutMs: 8_000, intervalMs: 100 }).catch(() => false);
    check("PID 1 is the image's init, which reaps orphans", pid > 0 && reaped === true && last.startsWith("/usr/bin/tini "),
      `orphan ${pid} was ${JSON.stringify(seen)}, then ${JSON.stringify(last)}`);
  } catch (error) {
    check("the default container answered", false, `${String(error)}\n${container.log.join("")}`);
  } finally {
    rpc.close();
    await stop(container, "default user");
  }
}

/** The image run as root with --user: commands run as the unprivileged user, the daemon stays root. */
async function rootWithUser(): Promise<void> {
  const [uid] = (config.User ?? "").split(":");
  const token = `image-root-${process.pid}`;
  writeFileSync(path.join(rootfs, "run/sandboxd-root-token"), token, { mode: 0o600 });
  chownSync(path.join(rootfs, "run/sandboxd-root-token"), 0, 0);
  const port = await freePort();
  const container = await startContainer("0:0", { SANDBOXD_PORT: String(port), SANDBOXD_TOKEN_FILE: "/run/sandboxd-root-token" }, ["--user", "sandbox"]);
  const rpc = client(container.url, token);
  try {
    const who = await text("id -u; id -un; echo $HOME", rpc);
    check("as root with --user sandbox, commands run as sandbox", who.stdout === `${uid}\nsandbox\n/home/sandbox\n` && who.exitCode === 0, JSON.stringify(who));
    check("the daemon says commands run as sandbox", container.log.join("").includes("commands run as sandbox"), container.log.join(""));
  } catch (error) {
    check("the root container answered", false, `${String(error)}\n${container.log.join("")}`);
  } finally {
    rpc.close();
    await stop(container, "root with --user");
  }
}

await defaultUser();
await rootWithUser();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
