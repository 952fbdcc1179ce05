import { execFileSync } from "node:child_process";

/**
 * Reads TCP_NODELAY of every established TCP socket of process `pid` whose local port is `port`:
 * the server side of each connection to that port. Node has no getsockopt, so a Python script takes
 * a duplicate of each socket fd with pidfd_getfd(2) (Linux 5.6+, needs ptrace rights over `pid`:
 * the test's own process, or root) and asks the kernel. Returns one boolean per socket.
 */
export function serverSocketsNoDelay(pid: number, port: number): boolean[] {
  const script = `
import ctypes, json, os, socket, sys
pid, port = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
pidfd = libc.syscall(434, pid, 0)  # pidfd_open
if pidfd < 0: raise OSError(ctypes.get_errno(), "pidfd_open")
found = []
for name in os.listdir(f"/proc/{pid}/fd"):
    try:
        if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"): continue
    except OSError:
        continue
    fd = libc.syscall(438, pidfd, int(name), 0)  # pidfd_getfd
    if fd < 0: continue
    s = socket.socket(fileno=fd)
    try:
        if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6): continue
        try:
            local, peer = s.getsockname()[1], s.getpeername()
        except OSError:
            continue
        if local == port: found.append(bool(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
    finally:
        s.close()
print(json.dumps(found))
`;
  return JSON.parse(
    execFileSync("python3", ["-c", script, String(pid), String(port)], { encoding: "utf8" }),
  ) as boolean[];
}
