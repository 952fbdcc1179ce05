"""Test support: a real daemon in a subprocess, a TCP proxy that cuts or blackholes connections, /proc helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: The repository root (python/tests/../..).
REPOSITORY = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], bool], *, timeout: float = 10.0, what: str = "the condition") -> None:
    """Polls ``predicate`` every 20 ms until it holds; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


async def async_wait_for(predicate: Callable[[], bool], *, timeout: float = 10.0, what: str = "the condition") -> None:
    """:func:`wait_for` for async tests: polls without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def sleep_marker(seconds: int = 1000) -> str:
    """A unique argument for ``sleep``, so the test can find exactly its own sleeps in /proc."""
    return f"{seconds}.{random.randint(1_000_000, 9_999_999)}"


def sleepers(marker: str) -> list[int]:
    """Pids of live processes whose command line is exactly ``sleep <marker>`` (not the shells that ran them)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/cmdline").read_bytes() != f"sleep\0{marker}\0".encode():
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry))
    return found


class Daemon:
    """A real sandboxd started as the CLI is (``node --import tsx src/cli/sandboxd.ts``) on a free port, with a
    temporary workspace; its URL is read from the JSON log line that says it listens."""

    def __init__(self, *args: str, token: str | None = None) -> None:
        self.workspace = os.path.realpath(tempfile.mkdtemp(prefix="sandboxd-py-"))
        self.token = token
        command = ["node", "--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--workspace", self.workspace]
        command += ["--log-format", "json", "--log-level", "info", *args]
        env = {key: value for key, value in os.environ.items() if not key.startswith("SANDBOXD_")}
        if token is not None:
            env["SANDBOXD_TOKEN"] = token
        self.process = subprocess.Popen(
            command, cwd=REPOSITORY, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.log: list[str] = []
        self.url = self._read_url(timeout=60.0)
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        # The daemon logs a line per call: drain its stderr so it never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _read_url(self, timeout: float) -> str:
        assert self.process.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            text = line.decode(errors="replace")
            self.log.append(text)
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("url"), str):
                return str(record["url"])
        self.close()
        raise RuntimeError("sandboxd did not report its url:\n" + "".join(self.log[-20:]))

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if len(self.log) < 10_000:
                self.log.append(line.decode(errors="replace"))

    def close(self) -> None:
        """Stops the daemon (SIGTERM, then SIGKILL after 10 s) and removes the workspace."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workspace, ignore_errors=True)


class TcpProxy:
    """A TCP proxy in front of the daemon that can cut every connection through it (a reset on both sides, as a
    network failure does), refuse new ones (as a daemon that is down does), or blackhole the open ones (bytes go
    nowhere and nothing is reset, as a dead path does)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket, threading.Event]] = []
        self._answers_muted = threading.Event()
        self._refusing = False
        self.connections = 0
        self.cuts = 0
        self.bytes_down = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> int:
        """Resets every open connection; returns how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self.cuts += len(pairs)
        for client, upstream, _ in pairs:
            for sock in (client, upstream):
                _reset(sock)
        return len(pairs)

    def refuse(self, refusing: bool) -> None:
        """Resets new connections while True."""
        self._refusing = refusing

    def blackhole(self) -> int:
        """Stops forwarding on every open connection without closing it; new connections work. Returns how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for _, _, frozen in pairs:
            frozen.set()
        return len(pairs)

    def mute_answers(self, muted: bool) -> None:
        """While True, drops every byte from the daemon to the client (requests still reach the daemon)."""
        if muted:
            self._answers_muted.set()
        else:
            self._answers_muted.clear()

    def close(self) -> None:
        """Stops listening and resets every connection."""
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                _reset(client)
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            frozen = threading.Event()
            with self._lock:
                self._pairs.append((client, upstream, frozen))
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream, frozen, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, frozen, True), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, frozen: threading.Event, down: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if frozen.is_set() or (down and self._answers_muted.is_set()):
                    continue
                if down:
                    self.bytes_down += len(data)
                target.sendall(data)
        except OSError:
            pass
        if not frozen.is_set():
            _reset(target)
            _reset(source)


def _reset(sock: socket.socket) -> None:
    # SO_LINGER 0: the close sends a RST instead of a FIN, so whatever was in flight is lost. The shutdown first
    # wakes a pump thread blocked in recv() on this socket: a bare close() from another thread would leave the
    # socket open under that call, and the peer would see a silent connection instead of a cut.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def run_python(code: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Runs Python code in a child interpreter of this venv and returns its outcome."""
    return subprocess.run([_python(), "-c", code, *args], capture_output=True, text=True, timeout=timeout, check=False)


def spawn_python(code: str, *args: str) -> subprocess.Popen[str]:
    """Starts Python code in a child interpreter of this venv, its stdout and stderr piped."""
    return subprocess.Popen([_python(), "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _python() -> str:
    import sys

    return sys.executable


def random_file(directory: str, name: str, size: int) -> Path:
    """Writes ``size`` random bytes to ``directory/name`` and returns the path."""
    path = Path(directory, name)
    path.write_bytes(os.urandom(size))
    return path


def env_without(names: Sequence[str]) -> dict[str, str]:
    """This environment without the given variables."""
    return {key: value for key, value in os.environ.items() if key not in names}
