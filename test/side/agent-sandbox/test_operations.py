"""What the SDK's own high-level methods get from a daemon with a token and no trusted peers: they send no
credentials, so they are refused (docs/OPERATIONS.md, "On agent-sandbox"; its snippet runs in test_trusted_peers.py,
from a trusted peer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conftest import Daemon, assert_the_sdks_methods_are_refused, connect

TOKEN = "operations-doc-token"


@pytest.fixture(scope="module")
def guarded() -> Iterator[Daemon]:
    started = Daemon(env={"SANDBOXD_TOKEN": TOKEN})
    try:
        yield started
    finally:
        started.close()


def test_the_sdks_own_methods_are_refused_by_a_daemon_with_a_token(guarded: Daemon) -> None:
    assert_the_sdks_methods_are_refused(connect(guarded))
