"""Fixtures: one real daemon for the session (with a token), sandboxes connected to it, a cutting proxy."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator

import pytest

import sandboxd
from sandboxd import ReconnectPolicy

from .support import Daemon, TcpProxy

#: Output the session's daemon retains per process: enough that a reader away during cuts never meets a gap.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024

#: A reconnect policy for tests: quick backoff, still jittered.
FAST_RECONNECT = ReconnectPolicy(max_attempts=5, backoff_base=0.02, backoff_max=0.2, jitter=0.5)


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """The session's daemon, token required."""
    started = Daemon("--max-output-bytes", str(MAX_OUTPUT_BYTES), "--linger-ms", "60000", token=secrets.token_hex(16))
    yield started
    started.close()


@pytest.fixture
def sandbox(daemon: Daemon) -> Iterator[sandboxd.Sandbox]:
    """A sync sandbox on the daemon, closed (its processes killed) after the test."""
    with sandboxd.connect(daemon.url, token=daemon.token or "", workspace=[daemon.workspace], reconnect=FAST_RECONNECT) as connected:
        yield connected
        connected.close(kill_processes=True)


@pytest.fixture
async def async_sandbox(daemon: Daemon) -> AsyncIterator[sandboxd.AsyncSandbox]:
    """An asyncio sandbox on the daemon, closed after the test."""
    async with sandboxd.AsyncSandbox(daemon.url, token=daemon.token or "", workspace=[daemon.workspace], reconnect=FAST_RECONNECT) as connected:
        yield connected
        await connected.close(kill_processes=True)


@pytest.fixture
def proxy(daemon: Daemon) -> Iterator[TcpProxy]:
    """A TCP proxy in front of the daemon."""
    started = TcpProxy(daemon.host, daemon.port)
    yield started
    started.close()
