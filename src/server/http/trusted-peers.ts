import net from "node:net";
import os from "node:os";

/**
 * Decides whether the peer of a connection may call without the token: its address lies in one of
 * the networks named, and it is not an address of this machine (loopback, or any interface's), so a
 * process beside the daemon (a sandbox's own command, a sidecar of its pod) is never trusted, however
 * it connects. Each connection is decided once, when first asked.
 */
export interface TrustedPeers {
  /** The networks as given, for the start line. */
  readonly networks: readonly string[];
  /** Whether the peer of this socket is trusted. */
  admits(socket: net.Socket | null | undefined): boolean;
}

/** Options for {@link createTrustedPeers}. */
export interface TrustedPeersOptions {
  /** This machine's addresses, asked once per new connection. Default: every interface's (`os.networkInterfaces`). */
  localAddresses?: () => Iterable<string>;
}

/**
 * Creates the check of {@link TrustedPeers} for networks in CIDR notation (`10.0.0.0/8`, `fd00::/8`);
 * a bare address is a network of one. Throws an Error naming an entry that is not one.
 */
export function createTrustedPeers(networks: readonly string[], options: TrustedPeersOptions = {}): TrustedPeers {
  const list = new net.BlockList();
  for (const network of networks) addNetwork(list, network);
  const localAddresses = options.localAddresses ?? interfaceAddresses;
  const decided = new WeakMap<object, boolean>();
  return {
    networks: [...networks],
    admits(socket) {
      if (socket === null || socket === undefined) return false;
      const known = decided.get(socket);
      if (known !== undefined) return known;
      const answer = isTrustedAddress(list, socket.remoteAddress, localAddresses);
      decided.set(socket, answer);
      return answer;
    },
  };
}

/** Whether `address` is in `list` and not loopback or one of `localAddresses`. */
function isTrustedAddress(
  list: net.BlockList,
  address: string | undefined,
  localAddresses: () => Iterable<string>,
): boolean {
  if (address === undefined) return false;
  const bare = unmapped(address);
  const family = net.isIP(bare);
  if (family === 0) return false;
  if (isLoopbackAddress(bare)) return false;
  for (const local of localAddresses()) if (unmapped(local) === bare) return false;
  return list.check(bare, family === 4 ? "ipv4" : "ipv6");
}

/** `::ffff:10.1.2.3` (an IPv4 peer of a dual-stack socket) -> `10.1.2.3`; others unchanged, lower case. */
function unmapped(address: string): string {
  const lower = address.toLowerCase();
  return lower.startsWith("::ffff:") && net.isIP(lower.slice(7)) === 4 ? lower.slice(7) : lower;
}

function isLoopbackAddress(address: string): boolean {
  return address === "::1" || (net.isIP(address) === 4 && address.startsWith("127."));
}

function interfaceAddresses(): string[] {
  return Object.values(os.networkInterfaces()).flatMap((each) => (each ?? []).map((entry) => entry.address));
}

function addNetwork(list: net.BlockList, network: string): void {
  const [address, prefixText, ...rest] = network.trim().split("/");
  const family = net.isIP(address);
  const bits = family === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? bits : Number(prefixText);
  if (
    family === 0 ||
    rest.length > 0 ||
    (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) ||
    !(prefix >= 0 && prefix <= bits)
  ) {
    throw new Error(`not a network in CIDR notation: ${JSON.stringify(network)} (such as 10.0.0.0/8 or fd00::/8)`);
  }
  list.addSubnet(address, prefix, family === 4 ? "ipv4" : "ipv6");
}
