import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { userInfo } from "node:os";

/** A user to run commands as, resolved from the password database. */
export interface UserIdentity {
  /** Login name (USER, LOGNAME); the uid as text when the database has no entry. */
  name: string;
  /** Numeric user id. */
  uid: number;
  /** Primary group id. */
  gid: number;
  /** Home directory (HOME); "/" when unknown. */
  home: string;
  /** Login shell (SHELL); undefined when unknown. */
  shell?: string;
}

/**
 * Resolves `user`, a login name or a numeric uid, through `getent passwd` (so NSS sources count), or
 * /etc/passwd when getent is missing. A numeric uid without an entry resolves to that uid with an
 * equal gid and HOME=/. Throws an Error for an unknown name.
 */
export function resolveUser(user: string): UserIdentity {
  const entry = passwdEntry(user);
  if (entry !== undefined) return entry;
  if (/^\d+$/.test(user)) {
    const uid = Number(user);
    return { name: user, uid, gid: uid, home: "/" };
  }
  throw new Error(`unknown user: ${user}`);
}

/** The identity of root, what `sudo` runs as. */
export const rootIdentity: UserIdentity = { name: "root", uid: 0, gid: 0, home: "/root" };

/**
 * The identity of the daemon's own user, from the password database (getpwuid), never from HOME,
 * USER or LOGNAME; a uid without an entry gets its number as name and HOME=/.
 */
export function currentUser(): UserIdentity {
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? uid;
  try {
    const info = userInfo();
    return { name: info.username, uid, gid, home: info.homedir || "/", shell: info.shell ?? undefined };
  } catch {
    return { name: String(uid), uid, gid, home: "/" };
  }
}

function passwdEntry(user: string): UserIdentity | undefined {
  let lines: string[];
  try {
    lines = execFileSync("getent", ["passwd", user], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).split(
      "\n",
    );
  } catch (error) {
    // getent exits 2 for an unknown key; anything else means it is unusable here.
    if ((error as { status?: number }).status === 2) return undefined;
    lines = readFileSync("/etc/passwd", "utf8").split("\n");
  }
  for (const line of lines) {
    const [name, , uid, gid, , home, shell] = line.split(":");
    if (name === undefined || uid === undefined || gid === undefined) continue;
    if (name === user || uid === user)
      return { name, uid: Number(uid), gid: Number(gid), home: home || "/", shell: shell || undefined };
  }
  return undefined;
}

/**
 * The group ids `user` gets when a command runs as it: its primary group and the supplementary ones
 * (`id -G`, so NSS sources count, as initgroups does); the primary group alone when `id` fails.
 */
export function groupsOf(user: UserIdentity): number[] {
  try {
    const text = execFileSync("id", ["-G", user.name], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 5000,
    });
    const groups = text.trim().split(/\s+/).map(Number).filter(Number.isInteger);
    return groups.includes(user.gid) ? groups : [user.gid, ...groups];
  } catch {
    return [user.gid];
  }
}
