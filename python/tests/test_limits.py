"""Per-command limits and usage against a real daemon: what a command used, and a limit above the daemon's cap."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sandboxd
from sandboxd import InvalidArgumentError

from .support import Daemon


@pytest.fixture(scope="module")
def capped() -> Iterator[Daemon]:
    """A daemon whose commands may ask for at most 256 MiB of memory each."""
    started = Daemon("--max-command-memory-bytes", str(256 * 1024 * 1024))
    yield started
    started.close()


def test_usage_of_a_busy_loop_and_a_limit_above_the_cap(capped: Daemon) -> None:
    with sandboxd.connect(capped.url, workspace=[capped.workspace]) as sandbox:
        result = sandbox.exec("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done", limits={"memory_bytes": 64 * 1024 * 1024})
        assert result.exit_code == 0
        usage = result.exit.usage
        if usage is None:
            pytest.skip("the daemon has no cgroups of its own for commands here (not root?)")
        assert usage.cpu_user is not None and usage.cpu_system is not None
        assert usage.cpu_user + usage.cpu_system > 0.01
        assert usage.memory_peak_bytes is not None and 0 < usage.memory_peak_bytes <= 64 * 1024 * 1024
        assert usage.oom_kills == 0
        with pytest.raises(InvalidArgumentError) as refused:
            sandbox.exec("true", limits={"memory_bytes": 512 * 1024 * 1024})
        assert refused.value.reason == "LIMIT_ABOVE_CAP"
        assert refused.value.metadata["cap"] == "max-command-memory-bytes"
        with pytest.raises(InvalidArgumentError):
            sandbox.exec("true", limits={"cpus": -1})
