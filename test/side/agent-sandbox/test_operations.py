"""docs/OPERATIONS.md's "On agent-sandbox" as a user runs it, against a daemon with a token; and what the SDK's own
high-level methods get from such a daemon (they send no credentials)."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import k8s_agent_sandbox.sandbox_client
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.sandbox import Sandbox

from conftest import REPOSITORY, ClusterStandIn, Daemon, connect

TOKEN = "operations-doc-token"


@pytest.fixture(scope="module")
def guarded() -> Iterator[Daemon]:
    started = Daemon(env={"SANDBOXD_TOKEN": TOKEN})
    try:
        yield started
    finally:
        started.close()


def section_python() -> str:
    text = (Path(REPOSITORY) / "docs/OPERATIONS.md").read_text()
    section = text[text.index("\n## On agent-sandbox\n") : text.index("\n## ", text.index("\n## On agent-sandbox\n") + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one Python block"
    return blocks[0]


def test_the_documented_snippet_runs_as_written(guarded: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cluster is what is stood in for: the SDK's Kubernetes calls, and the claim the controller would answer
    # with a ready sandbox of the warm pool. Everything after the claim is the SDK talking to the daemon.
    monkeypatch.setattr(k8s_agent_sandbox.sandbox_client, "K8sHelper", lambda **_: ClusterStandIn())
    monkeypatch.setattr(k8s_agent_sandbox.sandbox_client.SandboxClient, "create_sandbox", lambda self, warmpool, **_: connect(guarded))
    monkeypatch.setenv("SANDBOXD_TOKEN", TOKEN)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(section_python(), "docs/OPERATIONS.md", "exec"), {})
    expected = [comment.strip() for line in section_python().splitlines() for comment in re.findall(r"# → (.*)$", line)]
    assert printed.getvalue().splitlines() == expected


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
