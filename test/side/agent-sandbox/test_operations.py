"""What the SDK's own high-level methods get from a daemon with a token and no trusted peers: they send no
credentials, so they are refused (docs/OPERATIONS.md, "On agent-sandbox"; its snippet runs in test_trusted_peers.py,
from a trusted peer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.sandbox import Sandbox

from conftest import Daemon, connect

TOKEN = "operations-doc-token"


@pytest.fixture(scope="module")
def guarded() -> Iterator[Daemon]:
    started = Daemon(env={"SANDBOXD_TOKEN": TOKEN})
    try:
        yield started
    finally:
        started.close()


def test_the_sdks_own_methods_are_refused_by_a_daemon_with_a_token(guarded: Daemon) -> None:
    sandbox: Sandbox = connect(guarded)
    try:
        with pytest.raises(RuntimeError, match="UNAUTHENTICATED"):
            sandbox.commands.run("true")
        with pytest.raises(SandboxRequestError) as refused:
            sandbox.files.read("anything")
        assert refused.value.status_code == 401
    finally:
        sandbox.connector.close()
