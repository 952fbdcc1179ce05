"""Readiness against a real daemon: wait_for_port, wait_for_log and wait_for_exit on handles (sync and asyncio), the
sandbox's wait_for_port and list_ports, their errors with the last output lines, and cancellation."""

from __future__ import annotations

import asyncio
import re
import socket

import pytest

import sandboxd
from sandboxd import AsyncSandbox, Sandbox

from .support import sleep_marker, wait_for


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def late_server(port: int) -> str:
    """A python3 HTTP server on ``port`` that binds 1.5 s after saying it starts."""
    return f"echo starting; sleep 1.5; exec python3 -u -m http.server {port} --bind 127.0.0.1"


def test_wait_for_port_finds_a_server_that_binds_late_and_list_ports_names_it(sandbox: Sandbox) -> None:
    port = free_port()
    with sandbox.start_process(late_server(port)) as server:
        ready = server.wait_for_port(port, timeout=30)
        assert (ready.address, ready.http_status) == (f"127.0.0.1:{port}", 200)
        assert ready.attempts > 1
        tcp = sandbox.wait_for_port(port, mode="tcp", timeout=10)
        assert tcp.http_status == 0
        missing = server.wait_for_port(port, path="/missing", status=404, timeout=10)
        assert missing.http_status == 404
        listed = [entry for entry in sandbox.list_ports() if entry.port == port]
        assert [(entry.address, entry.program, entry.process_id) for entry in listed] == [
            ("127.0.0.1", "python3", server.process_id)
        ]
        assert [entry.port for entry in sandbox.list_ports(process_id=server.process_id)] == [port]


def test_a_port_never_bound_times_out_with_the_last_lines(sandbox: Sandbox) -> None:
    port = free_port()
    with sandbox.start_process(f"echo 'step 1'; echo 'cache cold' >&2; sleep {sleep_marker(60)}") as server:
        server.wait_for_log("cache cold", stream="stderr", timeout=10)
        with pytest.raises(sandboxd.ProcessReadyTimeoutError) as caught:
            server.wait_for_port(port, mode="tcp", timeout=1.5)
        error = caught.value
        assert isinstance(error, TimeoutError)
        assert (error.code, error.reason, error.timeout) == ("PROCESS_READY_TIMEOUT", "WAIT_TIMED_OUT", 1.5)
        assert (error.process_id, error.condition) == (server.process_id, f"port {port}")
        assert (error.last_stdout, error.last_stderr) == ("step 1", "cache cold")
        assert f"127.0.0.1:{port}: connection refused" in error.last_probe


def test_a_process_that_exits_first_fails_the_wait_at_once(sandbox: Sandbox) -> None:
    port = free_port()
    crashed = sandbox.start_process("echo 'Traceback: boom' >&2; exit 4")
    with pytest.raises(sandboxd.ProcessExitedBeforeReadyError) as caught:
        crashed.wait_for_port(port, timeout=60)
    error = caught.value
    assert (error.code, error.reason, error.exit_code, error.last_stderr) == (
        "FAILED_PRECONDITION",
        "PROCESS_EXITED",
        4,
        "Traceback: boom",
    )
    assert error.exit is not None and error.exit.status == sandboxd.ProcessStatus.FAILED
    with pytest.raises(sandboxd.ProcessExitedBeforeReadyError):
        crashed.wait_for_log("ready", timeout=60)


def test_wait_for_log_matches_a_line_printed_before_the_wait_and_one_split_across_writes(sandbox: Sandbox) -> None:
    with sandbox.start_process(
        f"echo 'listening on port 4321'; printf 'ready in '; sleep 0.3; echo '12 ms'; sleep {sleep_marker(60)}"
    ) as server:
        wait_for(lambda: server.refresh() is not None and (server.info is not None and server.info.stdout_bytes >= 38))
        found = server.wait_for_log(r"port (?<port>\d+)", timeout=10)
        assert (found.line, found.match, found.groups, found.named_groups) == (
            "listening on port 4321",
            "port 4321",
            ("4321",),
            {"port": "4321"},
        )
        assert (found.stream, found.line_offset, found.offset) == ("stdout", 0, 13)
        split = server.wait_for_log(re.compile(r"ready in (\d+) ms"), timeout=10)
        assert (split.groups, split.line_offset) == (("12",), 23)
        with pytest.raises(sandboxd.InvalidArgumentError):
            server.wait_for_log(re.compile("READY", re.IGNORECASE))
        with pytest.raises(sandboxd.InvalidArgumentError) as invalid:
            server.wait_for_log(r"(a)\1")
        assert invalid.value.reason == "PATTERN_INVALID"


def test_wait_for_exit_returns_the_exit_and_its_timeout_leaves_the_process_running(sandbox: Sandbox) -> None:
    job = sandbox.start_process("echo working; sleep 3; exit 6")
    # The line first: on a busy machine the shell may not have printed it within the 0.1 s wait.
    job.wait_for_log("working", timeout=30)
    with pytest.raises(sandboxd.ProcessReadyTimeoutError) as caught:
        job.wait_for_exit(timeout=0.1)
    assert (caught.value.condition, caught.value.last_stdout) == ("exit", "working")
    exit = job.wait_for_exit(timeout=30)
    assert (exit.exit_code, exit.status) == (6, sandboxd.ProcessStatus.FAILED)
    assert job.exit_code == 6


async def test_asyncio_waits_and_a_cancelled_wait(async_sandbox: AsyncSandbox) -> None:
    port = free_port()
    server = await async_sandbox.start_process(late_server(port))
    try:
        ready = await server.wait_for_port(port, timeout=30)
        assert ready.http_status == 200
        assert (await server.wait_for_log("starting")).line_offset == 0
        ports = await async_sandbox.list_ports(process_id=server.process_id)
        assert [entry.port for entry in ports] == [port]
        waiting = asyncio.ensure_future(server.wait_for_log("never printed"))
        # Still waiting a moment later, then cancelled while the call is open.
        done, _ = await asyncio.wait({waiting}, timeout=0.2)
        assert not done
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    finally:
        await server.kill("SIGKILL")
    exit = await server.wait_for_exit(timeout=30)
    assert exit.signal == "SIGKILL"
