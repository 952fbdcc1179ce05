import { readFileSync } from "node:fs";
import { readdir, readlink } from "node:fs/promises";
import { ProcessError } from "../errors.js";

/** A TCP socket in the LISTEN state, as the kernel's socket tables show it. */
export interface ListeningSocket {
  /** The port. */
  readonly port: number;
  /** The local address it is bound to ("0.0.0.0", "::", "127.0.0.1"). */
  readonly address: string;
  /** Whether it is an IPv6 socket. */
  readonly ipv6: boolean;
  /** The socket's inode number, by which processes' fds name it. */
  readonly inode: number;
}

/** A listening socket with the process that holds it, where the daemon may see it. */
export interface ListeningPort extends Omit<ListeningSocket, "inode"> {
  /** The pid of a process holding the socket (the lowest one); 0 when unknown. */
  readonly pid: number;
  /** That process's program name (its comm); empty when unknown. */
  readonly program: string;
  /** The id of the daemon's process whose tree holds it; empty when none does. */
  readonly processId: string;
}

/** The kernel's state number of a listening TCP socket in /proc/net/tcp. */
const listenState = "0A";

/**
 * Reads the listening TCP sockets of this network namespace from /proc/net/tcp and /proc/net/tcp6.
 * Throws a ProcessError PORTS_UNAVAILABLE when neither can be read (no /proc).
 */
export function readListeningSockets(proc = "/proc"): ListeningSocket[] {
  const sockets: ListeningSocket[] = [];
  let readable = 0;
  let failure: NodeJS.ErrnoException | undefined;
  for (const ipv6 of [false, true]) {
    const path = `${proc}/net/tcp${ipv6 ? "6" : ""}`;
    let table: string;
    try {
      table = readFileSync(path, "utf8");
      readable++;
    } catch (error) {
      failure ??= Object.assign(error as NodeJS.ErrnoException, { path });
      continue;
    }
    for (const line of table.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields.length < 10 || fields[3] !== listenState) continue;
      const [addressHex, portHex] = fields[1]!.split(":");
      sockets.push({
        port: Number.parseInt(portHex!, 16),
        address: ipv6 ? ipv6Text(addressHex!) : ipv4Text(addressHex!),
        ipv6,
        inode: Number(fields[9]),
      });
    }
  }
  if (readable === 0) {
    throw new ProcessError(`cannot read the socket tables: ${failure?.message}`, "PORTS_UNAVAILABLE", {
      metadata: { path: failure?.path ?? `${proc}/net/tcp`, errno: failure?.code ?? "" },
      cause: failure,
    });
  }
  return sockets.sort(
    (a, b) => a.port - b.port || Number(a.ipv6) - Number(b.ipv6) || a.address.localeCompare(b.address),
  );
}

/** An IPv4 address of /proc/net/tcp: 8 hex digits of a 32-bit word in the host's (little-endian) order. */
function ipv4Text(hex: string): string {
  const bytes = Buffer.from(hex, "hex");
  return [...bytes.reverse()].join(".");
}

/** An IPv6 address of /proc/net/tcp6: four 32-bit words, each in host order, written compressed ("::1"). */
function ipv6Text(hex: string): string {
  const words = hex.match(/.{8}/g) ?? [];
  const bytes = Buffer.concat(words.map((word) => Buffer.from(word, "hex").reverse()));
  const groups = (bytes.toString("hex").match(/.{4}/g) ?? []).join(":");
  // The URL parser writes an IPv6 address in its canonical, compressed form.
  return new URL(`http://[${groups}]/`).hostname.slice(1, -1);
}

/** What /proc/<pid>/stat says of a process that matters here. */
interface ProcessStat {
  readonly ppid: number;
  readonly processGroup: number;
  readonly session: number;
}

function readStat(pid: number, proc: string): ProcessStat | undefined {
  try {
    const stat = readFileSync(`${proc}/${pid}/stat`, "utf8");
    // The program name is in parentheses and may hold anything: the fields after the last ")" are fixed.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { ppid: Number(fields[1]), processGroup: Number(fields[2]), session: Number(fields[3]) };
  } catch {
    return undefined;
  }
}

function readQuietly(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** How many processes' fd tables are read at once. */
const fdScanConcurrency = 8;

/**
 * The processes holding each of `inodes`, by inode, lowest pid first: every fd of every process the
 * daemon may look into (its own user's, or all as root) that links to `socket:[inode]`. Processes it
 * may not look into are skipped. Read asynchronously, a few processes at a time: a machine's fd
 * tables are thousands of links, which read synchronously held the daemon's loop for 50-170 ms.
 */
async function socketHolders(inodes: ReadonlySet<number>, proc: string): Promise<Map<number, number[]>> {
  const holders = new Map<number, number[]>();
  if (inodes.size === 0) return holders;
  const pids = (await readdir(proc)).filter((entry) => /^\d+$/.test(entry)).map(Number);
  let next = 0;
  const scan = async () => {
    while (next < pids.length) {
      const pid = pids[next++]!;
      let fds: string[];
      try {
        fds = await readdir(`${proc}/${pid}/fd`);
      } catch {
        continue;
      }
      for (const fd of fds) {
        let target: string;
        try {
          target = await readlink(`${proc}/${pid}/fd/${fd}`);
        } catch {
          continue;
        }
        if (!target.startsWith("socket:[")) continue;
        const inode = Number(target.slice(8, -1));
        if (!inodes.has(inode)) continue;
        const list = holders.get(inode) ?? [];
        if (!list.includes(pid)) list.push(pid);
        holders.set(inode, list);
      }
    }
  };
  await Promise.all(Array.from({ length: fdScanConcurrency }, scan));
  for (const list of holders.values()) list.sort((a, b) => a - b);
  return holders;
}

/**
 * Decides which of the daemon's processes a pid belongs to: the process itself or one it started,
 * found through the parent chain, the process group and the session (a command leads its own group
 * and session), and, for a process that left them all (a double-forked daemon re-parented to the
 * sandbox's reaper, in a session of its own), the cgroup: a command's own cgroup holds its whole
 * tree. `leaders` maps the pid of each running command's leader to its process id.
 */
export function createTreeLookup(
  leaders: ReadonlyMap<number, string>,
  proc = "/proc",
): (pid: number) => string | undefined {
  const ownCgroup = readQuietly(`${proc}/self/cgroup`);
  let byCgroup: Map<string, string> | undefined;
  const cgroupOwners = () => {
    if (byCgroup !== undefined) return byCgroup;
    byCgroup = new Map();
    for (const [pid, id] of leaders) {
      const cgroup = readQuietly(`${proc}/${pid}/cgroup`);
      // A leader in the daemon's own cgroup (no cgroup per command here) tells nothing.
      if (cgroup !== undefined && cgroup !== ownCgroup) byCgroup.set(cgroup, id);
    }
    return byCgroup;
  };
  return (pid) => {
    const seen = new Set<number>();
    for (let current = pid; current > 1 && !seen.has(current); ) {
      seen.add(current);
      const direct = leaders.get(current);
      if (direct !== undefined) return direct;
      const stat = readStat(current, proc);
      if (stat === undefined) break;
      const grouped = leaders.get(stat.processGroup) ?? leaders.get(stat.session);
      if (grouped !== undefined) return grouped;
      current = stat.ppid;
    }
    const cgroup = readQuietly(`${proc}/${pid}/cgroup`);
    return cgroup === undefined ? undefined : cgroupOwners().get(cgroup);
  };
}

/**
 * Lists the TCP ports listening in this network namespace, each with the lowest pid holding its
 * socket, that process's program name, and the id of the daemon's process whose tree it belongs to
 * (see {@link createTreeLookup}). Throws a ProcessError PORTS_UNAVAILABLE without /proc/net.
 */
export async function listListeningPorts(
  leaders: ReadonlyMap<number, string>,
  proc = "/proc",
): Promise<ListeningPort[]> {
  const sockets = readListeningSockets(proc);
  const holders = await socketHolders(new Set(sockets.map((socket) => socket.inode)), proc);
  const treeOf = createTreeLookup(leaders, proc);
  return sockets.map(({ inode, ...socket }) => {
    const pids = holders.get(inode) ?? [];
    const pid = pids[0] ?? 0;
    const processId = pids.map(treeOf).find((id) => id !== undefined) ?? "";
    const program = pid === 0 ? "" : (readQuietly(`${proc}/${pid}/comm`)?.trim() ?? "");
    return { ...socket, pid, program, processId };
  });
}
