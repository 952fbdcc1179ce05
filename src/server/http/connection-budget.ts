import net from "node:net";

/**
 * Default most connections one peer may hold without having made an authenticated call, for a
 * budget of `maxConnections` in all: a quarter of it, at least 1.
 */
export function defaultMaxConnectionsPerPeer(maxConnections: number): number {
  return Math.max(1, Math.floor(maxConnections / 4));
}

/** One open connection as the budget sees it. */
export interface BudgetedConnection {
  /** The peer it counts against: see {@link peerOfAddress}. */
  readonly peer: string;
  /**
   * Whether it made a call the daemon let through with the token (any call but health on a
   * daemon without one): such a connection is never closed to make room.
   */
  proven(): boolean;
  /** Closes it, to make room for a newcomer. */
  close(): void;
}

/** Options for {@link createConnectionBudget}. */
export interface ConnectionBudgetOptions {
  /** Most connections open at once, proven or not. */
  maxConnections: number;
  /** Most unproven connections of one peer; 0 for no such cap. */
  maxConnectionsPerPeer: number;
  /** Called with each connection closed to make room, before it is closed. */
  onDisplaced?: (connection: BudgetedConnection) => void;
}

/**
 * The connection budget of a listener: at most `maxConnections` open connections, and at most
 * `maxConnectionsPerPeer` of one peer that have not proven themselves with an authenticated call.
 *
 * A peer at its cap that opens one more loses its own oldest unproven connection for it. A full
 * budget makes room by closing the oldest unproven connection of the peer holding the most of them;
 * when every connection is proven, the newcomer is refused. So sockets that never finish a request
 * cannot keep a client out, from another address or from the client's own: a newcomer displaces
 * them, and proven connections, which hold the daemon's honest work, are never displaced. A peer
 * opening more connections displaces those of the peers holding the most, its own first.
 */
export interface ConnectionBudget {
  /** Connections counted now. */
  readonly size: number;
  /**
   * Counts a new connection, closing another to make room when needed (see above). Returns false
   * when there is no room: the caller closes the newcomer.
   */
  admit(connection: BudgetedConnection): boolean;
  /** Stops counting a connection that closed. Idempotent. */
  release(connection: BudgetedConnection): void;
}

/** Creates a {@link ConnectionBudget}. */
export function createConnectionBudget(options: ConnectionBudgetOptions): ConnectionBudget {
  /** Connections by peer, each set in the order they arrived (oldest first). */
  const peers = new Map<string, Set<BudgetedConnection>>();
  let size = 0;

  const release = (connection: BudgetedConnection) => {
    const own = peers.get(connection.peer);
    if (own === undefined || !own.delete(connection)) return;
    size--;
    if (own.size === 0) peers.delete(connection.peer);
  };
  const displace = (connection: BudgetedConnection) => {
    release(connection);
    options.onDisplaced?.(connection);
    connection.close();
  };
  /** The number of unproven connections of one peer, and the oldest of them. */
  const unprovenOf = (own: Set<BudgetedConnection>) => {
    let count = 0;
    let oldest: BudgetedConnection | undefined;
    for (const connection of own) {
      if (connection.proven()) continue;
      count++;
      oldest ??= connection;
    }
    return { count, oldest };
  };

  return {
    get size() {
      return size;
    },
    admit(connection) {
      const own = peers.get(connection.peer);
      if (options.maxConnectionsPerPeer > 0 && own !== undefined && own.size >= options.maxConnectionsPerPeer) {
        const { count, oldest } = unprovenOf(own);
        if (count >= options.maxConnectionsPerPeer && oldest !== undefined) displace(oldest);
      }
      if (size >= options.maxConnections) {
        let victim: BudgetedConnection | undefined;
        let most = 0;
        for (const others of peers.values()) {
          const { count, oldest } = unprovenOf(others);
          if (count > most) {
            victim = oldest;
            most = count;
          }
        }
        if (victim === undefined) return false;
        displace(victim);
      }
      let mine = peers.get(connection.peer);
      if (mine === undefined) peers.set(connection.peer, (mine = new Set()));
      mine.add(connection);
      size++;
      return true;
    },
    release,
  };
}

/**
 * The peer a remote address counts as: an IPv4 address itself (also when IPv4-mapped, `::ffff:a.b.c.d`),
 * an IPv6 address its /64 prefix, which one host usually holds whole.
 */
export function peerOfAddress(address: string | undefined): string {
  if (address === undefined) return "?";
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped !== null) return mapped[1];
  if (net.isIPv4(address) || !net.isIPv6(address)) return address;
  return `${expandIPv6(address).slice(0, 4).join(":")}::/64`;
}

/** The eight 16-bit groups of an IPv6 address, in lowercase hex without leading zeros. */
function expandIPv6(address: string): string[] {
  const withoutZone = address.split("%")[0];
  const [head, tail] = withoutZone.includes("::") ? withoutZone.split("::") : [withoutZone, undefined];
  const headGroups = head === "" ? [] : head.split(":");
  const tailGroups = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups =
    tail === undefined
      ? headGroups
      : [...headGroups, ...Array<string>(8 - headGroups.length - tailGroups.length).fill("0"), ...tailGroups];
  return groups.map((group) => (group.includes(".") ? group : Number.parseInt(group, 16).toString(16)));
}
