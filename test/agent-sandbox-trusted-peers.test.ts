import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseCommandLine } from "../src/cli/sandboxd/options.js";
import { startTestServer, type TestServer } from "./support/server.js";

const repositoryRoot = path.resolve(import.meta.dirname, "..");
const token = "trusted-peers-test-token";

/** Whether this machine lets the test make a network namespace with an address that is not its own. */
function canMakeNamespaces(): string | undefined {
  if (process.getuid?.() !== 0) return "needs root to make a network namespace";
  try {
    execFileSync("ip", ["-V"], { stdio: "ignore" });
  } catch {
    return "needs iproute2's ip";
  }
  // Root without CAP_SYS_ADMIN and CAP_NET_ADMIN (a container's default) cannot.
  const probe = `sbxprobe${randomBytes(3).toString("hex")}`;
  try {
    execFileSync("ip", ["netns", "add", probe], { stdio: "ignore" });
    execFileSync("ip", ["netns", "del", probe], { stdio: "ignore" });
  } catch {
    return "cannot make a network namespace here (CAP_SYS_ADMIN, CAP_NET_ADMIN)";
  }
  return undefined;
}
const cannot = canMakeNamespaces();
if (cannot !== undefined) console.warn(`agent-sandbox trusted peers: the peer tests are skipped: ${cannot}`);

/**
 * A network namespace joined to this one by a veth pair: the daemon's side has `hostAddress`, the
 * namespace's side `peerAddress`, an address this machine does not have. Beside it, a second veth
 * pair whose other end is down (no carrier, so Node's list of interfaces leaves it out): its address
 * `unlistedAddress` is this machine's all the same.
 */
interface PeerNamespace {
  name: string;
  hostAddress: string;
  peerAddress: string;
  unlistedAddress: string;
  /** Runs test/support/peer-probe.ts inside the namespace with these calls; its answers. */
  probe(calls: readonly object[]): Promise<unknown[]>;
  remove(): void;
}

/** Runs test/support/peer-probe.ts (after `prefix`, a command that runs it elsewhere) with these calls; its answers. */
async function runProbe(prefix: readonly string[], calls: readonly object[]): Promise<unknown[]> {
  const [file, ...args] = [...prefix, process.execPath, "--import", "tsx", "test/support/peer-probe.ts"];
  const { stdout } = await promisify(execFile)(file, [...args, JSON.stringify(calls)], {
    cwd: repositoryRoot,
    encoding: "utf8",
    timeout: 60_000,
  });
  return JSON.parse(stdout) as unknown[];
}

function createPeerNamespace(): PeerNamespace {
  const id = randomBytes(3).toString("hex");
  const name = `sbxtp${id}`;
  const subnet = 16 + (randomBytes(1)[0] % 200);
  const hostAddress = `10.214.${subnet}.1`;
  const peerAddress = `10.214.${subnet}.2`;
  const unlistedAddress = `10.214.${subnet}.5`;
  const ip = (...args: string[]) => execFileSync("ip", args, { stdio: ["ignore", "ignore", "pipe"] });
  ip("netns", "add", name);
  try {
    ip("link", "add", `sbxh${id}`, "type", "veth", "peer", "name", `sbxp${id}`);
    ip("link", "set", `sbxp${id}`, "netns", name);
    ip("addr", "add", `${hostAddress}/30`, "dev", `sbxh${id}`);
    ip("link", "set", `sbxh${id}`, "up");
    ip("-n", name, "addr", "add", `${peerAddress}/30`, "dev", `sbxp${id}`);
    ip("-n", name, "link", "set", `sbxp${id}`, "up");
    ip("-n", name, "link", "set", "lo", "up");
    ip("link", "add", `sbxd${id}`, "type", "veth", "peer", "name", `sbxe${id}`);
    ip("addr", "add", `${unlistedAddress}/30`, "dev", `sbxd${id}`);
    ip("link", "set", `sbxd${id}`, "up");
  } catch (error) {
    ip("netns", "del", name);
    try {
      ip("link", "del", `sbxd${id}`);
    } catch {
      // Never made.
    }
    throw error;
  }
  return {
    name,
    hostAddress,
    peerAddress,
    unlistedAddress,
    // The daemon runs in this process: the probe must not block its loop.
    probe: (calls) => runProbe(["ip", "netns", "exec", name], calls),
    // Removing the namespace removes the first veth pair with it.
    remove: () => {
      ip("netns", "del", name);
      ip("link", "del", `sbxd${id}`);
    },
  };
}

describe.skipIf(cannot !== undefined)("KEP-539.2 ports with trusted peers", () => {
  let namespace: PeerNamespace;
  let trusting: TestServer;
  let other: TestServer;

  beforeAll(async () => {
    namespace = createPeerNamespace();
    // The peer's network, and a daemon that trusts another network only.
    trusting = await startTestServer({
      host: "0.0.0.0",
      token,
      agentSandbox: {
        grpcPort: 0,
        restPort: 0,
        trustedPeers: [
          `${namespace.peerAddress.replace(/\d+$/, "0")}/30`,
          `${namespace.unlistedAddress.replace(/\d+$/, "4")}/30`,
        ],
      },
    });
    other = await startTestServer({
      host: "0.0.0.0",
      token,
      agentSandbox: { grpcPort: 0, restPort: 0, trustedPeers: ["192.0.2.0/24"] },
    });
  }, 60_000);
  afterAll(async () => {
    await trusting?.close();
    await other?.close();
    namespace?.remove();
  });

  const urls = (server: TestServer, host: string) => ({
    own: `http://${host}:${server.server.port}`,
    grpc: `http://${host}:${server.server.agentSandboxPorts.grpc}`,
    rest: `http://${host}:${server.server.agentSandboxPorts.rest}`,
  });

  it("serve a peer of a trusted network without the token: process.v1 and the REST files, as the SDK calls them", async () => {
    const at = urls(trusting, namespace.hostAddress);
    const answers = await namespace.probe([
      { kind: "execute", url: at.grpc },
      { kind: "rest", url: `${at.rest}/v1/files/from-peer.txt`, method: "PUT", body: "written by a peer" },
      { kind: "rest", url: `${at.rest}/v1/files/from-peer.txt`, method: "GET" },
      { kind: "rest", url: `${at.rest}/v1/metadata`, method: "GET" },
    ]);
    expect(answers[0]).toEqual({ stdout: "peer\n" });
    expect(answers[1]).toMatchObject({ status: 204 });
    expect(answers[2]).toEqual({ status: 200, body: "written by a peer" });
    expect(answers[3]).toMatchObject({ status: 200 });
    expect(readFileSync(path.join(trusting.workspace, "from-peer.txt"), "utf8")).toBe("written by a peer");
  });

  it("still need the token for everything else, and refuse a wrong one, from that same peer", async () => {
    const at = urls(trusting, namespace.hostAddress);
    const answers = await namespace.probe([
      // sandbox.v1 on the KEP's gRPC port, and process.v1 on the daemon's own port.
      { kind: "exec", url: at.grpc },
      { kind: "execute", url: at.own },
      { kind: "execute", url: at.grpc, token: "wrong" },
      { kind: "rest", url: `${at.rest}/v1/files/from-peer.txt`, method: "GET", token: "wrong" },
      // With the token, sandbox.v1 on the KEP's port as before.
      { kind: "exec", url: at.grpc, token },
      // A browser's request (a page that reached the pod by DNS rebinding), or one naming a host a page's
      // author could make resolve here: never a trusted peer's.
      {
        kind: "rest",
        url: `${at.rest}/v1/files/from-peer.txt`,
        method: "GET",
        headers: { origin: "http://evil.example" },
      },
      {
        kind: "rest",
        url: `${at.rest}/v1/files/from-peer.txt`,
        method: "GET",
        headers: { host: "rebound.evil.example" },
      },
    ]);
    expect(answers.slice(0, 3)).toEqual([
      { code: "Unauthenticated", reason: "UNAUTHENTICATED" },
      { code: "Unauthenticated", reason: "UNAUTHENTICATED" },
      { code: "Unauthenticated", reason: "UNAUTHENTICATED" },
    ]);
    expect(answers[3]).toMatchObject({ status: 401 });
    expect(answers[4]).toEqual({ stdout: "peer\n" });
    expect(answers[5]).toMatchObject({ status: 401 });
    expect(answers[6]).toMatchObject({ status: 401 });
  });

  it("never trust a peer on this machine, whatever address it calls from, nor one outside the networks named", async () => {
    // From this machine (the daemon's own address on the veth, one on an interface without a carrier,
    // which Node's list leaves out, and loopback): the trusted networks hold the first two, but a
    // command of the sandbox could call from them.
    for (const host of [namespace.hostAddress, namespace.unlistedAddress, "127.0.0.1"]) {
      const at = urls(trusting, host);
      const answers = await runProbe(
        [],
        [
          { kind: "execute", url: at.grpc },
          { kind: "rest", url: `${at.rest}/v1/files/from-peer.txt`, method: "GET" },
        ],
      );
      expect(answers[0]).toEqual({ code: "Unauthenticated", reason: "UNAUTHENTICATED" });
      expect(answers[1]).toMatchObject({ status: 401 });
    }
    const elsewhere = urls(other, namespace.hostAddress);
    const answers = await namespace.probe([
      { kind: "execute", url: elsewhere.grpc },
      { kind: "rest", url: `${elsewhere.rest}/v1/files/from-peer.txt`, method: "GET" },
    ]);
    expect(answers[0]).toEqual({ code: "Unauthenticated", reason: "UNAUTHENTICATED" });
    expect(answers[1]).toMatchObject({ status: 401 });
  });
});

describe("--agent-sandbox-trusted-peer", () => {
  it("is read from the flag (repeatable) and from SANDBOXD_AGENT_SANDBOX_TRUSTED_PEERS", () => {
    const fromFlags = parseCommandLine(
      ["--agent-sandbox", "--agent-sandbox-trusted-peer", "10.0.0.0/8", "--agent-sandbox-trusted-peer", "fd00::/8"],
      {},
    );
    expect(fromFlags.kind === "serve" && fromFlags.options.agentSandbox?.trustedPeers).toEqual([
      "10.0.0.0/8",
      "fd00::/8",
    ]);
    const fromEnv = parseCommandLine([], {
      SANDBOXD_AGENT_SANDBOX: "1",
      SANDBOXD_AGENT_SANDBOX_TRUSTED_PEERS: "10.0.0.0/8, 172.16.0.0/12",
    });
    expect(fromEnv.kind === "serve" && fromEnv.options.agentSandbox?.trustedPeers).toEqual([
      "10.0.0.0/8",
      "172.16.0.0/12",
    ]);
    expect(() => parseCommandLine(["--agent-sandbox-trusted-peer", "10.0.0.0/8"], {})).toThrow(
      "--agent-sandbox-trusted-peer needs a KEP-539.2 port",
    );
  });

  it("is refused at start without a token, and for a network that is not one", async () => {
    await expect(startTestServer({ agentSandbox: { grpcPort: 0, trustedPeers: ["10.0.0.0/8"] } })).rejects.toThrow(
      "agent-sandbox trusted peers need a token",
    );
    await expect(
      startTestServer({ token, agentSandbox: { restPort: 0, trustedPeers: ["10.0.0.0/33"] } }),
    ).rejects.toThrow('not a network in CIDR notation: "10.0.0.0/33"');
  });
});
