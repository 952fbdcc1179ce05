import { readFileSync } from "node:fs";
import type http from "node:http";
import net from "node:net";
import os from "node:os";

/**
 * Decides whether the peer of a connection may call without the token: its address lies in one of
 * the networks named and in none of those excluded (`!10.0.0.1/32`), and it is not an address of
 * this machine (loopback, or any address the kernel holds as its own, on an interface that is up or
 * not), so a process beside the daemon (a sandbox's own command, a sidecar of its pod) is never
 * trusted, however it connects. Each connection is decided once, when first asked.
 */
export interface TrustedPeers {
  /** The networks as given, exclusions included, for the start line. */
  readonly networks: readonly string[];
  /** Whether the peer of `connection` (an HTTP/2 session or an HTTP/1.1 socket) is trusted. */
  admits(connection: object): boolean;
}

/** Options for {@link createTrustedPeers}. */
export interface TrustedPeersOptions {
  /**
   * Whether `address` (bare, lower case) is one of this machine's, asked once per connection from a
   * network named. Default {@link isLocalAddress}.
   */
  isLocal?: (address: string, family: "ipv4" | "ipv6") => boolean;
}

/**
 * Creates the check of {@link TrustedPeers} for networks in CIDR notation (`10.0.0.0/8`, `fd00::/8`),
 * each excluded when written with a leading `!`; a bare address is a network of one. Throws an Error
 * naming an entry that is not one.
 */
export function createTrustedPeers(networks: readonly string[], options: TrustedPeersOptions = {}): TrustedPeers {
  const allowed = new net.BlockList();
  const excluded = new net.BlockList();
  for (const network of networks) {
    const text = network.trim();
    if (text.startsWith("!")) addNetwork(excluded, text.slice(1), network);
    else addNetwork(allowed, text, network);
  }
  const isLocal = options.isLocal ?? isLocalAddress;
  const decided = new WeakMap<object, boolean>();
  return {
    networks: [...networks],
    admits(connection) {
      const known = decided.get(connection);
      if (known !== undefined) return known;
      const answer = isTrustedAddress(socketOfConnection(connection)?.remoteAddress, allowed, excluded, isLocal);
      decided.set(connection, answer);
      return answer;
    },
  };
}

/** Whether `address` is allowed, not excluded, and not loopback or this machine's (checked last: it reads the kernel's tables). */
function isTrustedAddress(
  address: string | undefined,
  allowed: net.BlockList,
  excluded: net.BlockList,
  isLocal: NonNullable<TrustedPeersOptions["isLocal"]>,
): boolean {
  if (address === undefined) return false;
  const bare = unmapped(address);
  const family = net.isIP(bare) === 4 ? "ipv4" : net.isIP(bare) === 6 ? "ipv6" : undefined;
  if (family === undefined) return false;
  if (!allowed.check(bare, family) || excluded.check(bare, family)) return false;
  return !isLoopbackAddress(bare) && !isLocal(bare, family);
}

/** The socket of a connection: an HTTP/1.1 socket itself, an HTTP/2 session's. */
export function socketOfConnection(connection: object): net.Socket | undefined {
  return connection instanceof net.Socket ? connection : (connection as { socket?: net.Socket }).socket;
}

/** `::ffff:10.1.2.3` (an IPv4 peer of a dual-stack socket) -> `10.1.2.3`; others unchanged, lower case. */
function unmapped(address: string): string {
  const lower = address.toLowerCase();
  return lower.startsWith("::ffff:") && net.isIP(lower.slice(7)) === 4 ? lower.slice(7) : lower;
}

function isLoopbackAddress(address: string): boolean {
  return address === "::1" || (net.isIP(address) === 4 && address.startsWith("127."));
}

/** How long the kernel's list of this machine's addresses is kept, in milliseconds. */
const localAddressesTtlMs = 1000;
let localAddresses: { list: net.BlockList; readAt: number } | undefined;

/**
 * Whether `address` is one of this machine's: the kernel's local routes (`/proc/net/fib_trie`, every
 * `host LOCAL` range, so on interfaces that are down or have no carrier too, which
 * `os.networkInterfaces` leaves out), its IPv6 addresses (`/proc/net/if_inet6`) and every interface's
 * address Node lists. Read at most once a second.
 */
export function isLocalAddress(address: string, family: "ipv4" | "ipv6"): boolean {
  const now = performance.now();
  if (localAddresses === undefined || now - localAddresses.readAt > localAddressesTtlMs)
    localAddresses = { list: readLocalAddresses(), readAt: now };
  return localAddresses.list.check(address, family);
}

/** The kernel's flag of a local route (`RTF_LOCAL` in `/proc/net/ipv6_route`). */
const rtfLocal = 0x80000000;

/** `fd000000000000000000000000000002` -> `fd00:0000:...:0002`. */
function ipv6Of(hex: string): string {
  return hex.match(/.{4}/g)!.join(":");
}

function readLocalAddresses(): net.BlockList {
  const list = new net.BlockList();
  for (const entries of Object.values(os.networkInterfaces()))
    for (const entry of entries ?? []) {
      const address = unmapped(entry.address.split("%")[0]);
      list.addAddress(address, net.isIP(address) === 6 ? "ipv6" : "ipv4");
    }
  try {
    let last: string | undefined;
    for (const line of readFileSync("/proc/net/fib_trie", "utf8").split("\n")) {
      const leaf = /^\s*\|-- (\S+)$/.exec(line);
      if (leaf !== null) last = leaf[1];
      const local = /^\s*\/(\d+) \S+ LOCAL$/.exec(line);
      if (local !== null && last !== undefined && net.isIP(last) === 4) list.addSubnet(last, Number(local[1]), "ipv4");
    }
  } catch {
    // No /proc/net here: the interfaces above.
  }
  try {
    for (const line of readFileSync("/proc/net/if_inet6", "utf8").split("\n")) {
      const hex = line.split(/\s+/)[0];
      if (hex === undefined || !/^[0-9a-f]{32}$/i.test(hex)) continue;
      list.addAddress(ipv6Of(hex), "ipv6");
    }
    // Local routes (RTF_LOCAL), which may cover more than the addresses: `ip -6 route add local ... dev lo`.
    for (const line of readFileSync("/proc/net/ipv6_route", "utf8").split("\n")) {
      const [destination, prefix, , , , , , , flags] = line.trim().split(/\s+/);
      if (destination === undefined || !/^[0-9a-f]{32}$/i.test(destination) || flags === undefined) continue;
      if ((Number.parseInt(flags, 16) & rtfLocal) !== 0)
        list.addSubnet(ipv6Of(destination), Number.parseInt(prefix, 16), "ipv6");
    }
  } catch {
    // No IPv6 here.
  }
  return list;
}

/**
 * Why a request may not be let through as a trusted peer's even from a trusted address, or undefined
 * when it may: it comes from a web browser (an `Origin` or `Sec-Fetch-*` header: a page that reached
 * the daemon by DNS rebinding, or a cross-origin one), or it names a host that is not an address, a
 * name without a dot, or a cluster's service name (`.svc`, `.svc.cluster.local`, or `.svc.<domain>`
 * for a cluster domain that /etc/resolv.conf's search list names): names whose answers a page's
 * author could control.
 */
export function trustedRequestProblem(
  headers: http.IncomingHttpHeaders,
  domains: readonly string[] = serviceDomains(),
): string | undefined {
  if (headers.origin !== undefined) return "a browser's request (Origin)";
  for (const name of Object.keys(headers)) if (name.startsWith("sec-fetch-")) return "a browser's request (Sec-Fetch)";
  const host = headers[":authority"] ?? headers.host;
  if (typeof host !== "string" || host === "") return "no Host";
  const bare = host.startsWith("[") ? host.slice(1, host.indexOf("]")) : host.replace(/:\d+$/, "");
  const name = bare.toLowerCase().replace(/\.$/, "");
  if (net.isIP(name) !== 0 || !name.includes(".") || domains.some((domain) => name.endsWith(`.${domain}`)))
    return undefined;
  return `host ${JSON.stringify(host)} is not an address or a cluster service name`;
}

let knownServiceDomains: readonly string[] | undefined;

/** The suffixes of this pod's cluster's service names ({@link serviceDomainsOf} of /etc/resolv.conf), read once. */
function serviceDomains(): readonly string[] {
  if (knownServiceDomains === undefined) {
    let text = "";
    try {
      text = readFileSync("/etc/resolv.conf", "utf8");
    } catch {
      // No resolver configuration: the defaults.
    }
    knownServiceDomains = serviceDomainsOf(text);
  }
  return knownServiceDomains;
}

/**
 * The suffixes of a cluster's service names: `svc`, `svc.cluster.local`, and each `svc.<domain>` of
 * a resolv.conf's search list (Kubernetes writes `<namespace>.svc.<domain> svc.<domain> <domain>`).
 */
export function serviceDomainsOf(resolvConf: string): string[] {
  const domains = new Set(["svc", "svc.cluster.local"]);
  for (const line of resolvConf.split("\n")) {
    const [keyword, ...names] = line.trim().split(/\s+/);
    if (keyword !== "search") continue;
    for (const name of names) {
      const dotted = `.${name.toLowerCase().replace(/\.$/, "")}`;
      const at = dotted.indexOf(".svc.");
      if (at >= 0) domains.add(dotted.slice(at + 1));
    }
  }
  return [...domains];
}

function addNetwork(list: net.BlockList, network: string, entry: string): void {
  const [address, prefixText, ...rest] = network.split("/");
  const family = net.isIP(address);
  const bits = family === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? bits : Number(prefixText);
  if (
    family === 0 ||
    rest.length > 0 ||
    (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) ||
    !(prefix >= 0 && prefix <= bits)
  ) {
    throw new Error(
      `not a network in CIDR notation: ${JSON.stringify(entry)} (such as 10.0.0.0/8 or fd00::/8, or !10.0.0.1 to exclude one)`,
    );
  }
  list.addSubnet(address.toLowerCase(), prefix, family === 4 ? "ipv4" : "ipv6");
}
