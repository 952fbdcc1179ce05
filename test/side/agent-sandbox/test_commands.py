"""CommandExecutor.run of the unmodified agent-sandbox SDK: process.v1 Execute on the daemon's KEP-539.2 gRPC port."""

from __future__ import annotations

import os

import pytest
from k8s_agent_sandbox.sandbox import Sandbox

from conftest import Daemon
from support import sleep_marker, sleepers, wait_for


def test_run_returns_the_exit_code_and_both_streams(sandbox: Sandbox) -> None:
    result = sandbox.commands.run("echo hello; echo oops >&2; exit 3")
    assert (result.stdout, result.stderr, result.exit_code, result.timed_out) == ("hello\n", "oops\n", 3, False)


def test_run_with_env_and_cwd_inside_the_workspace(sandbox: Sandbox, daemon: Daemon) -> None:
    os.makedirs(os.path.join(daemon.workspace, "src"), exist_ok=True)
    result = sandbox.commands.run('printf "%s %s" "$GREETING" "$(pwd)"', env={"GREETING": "hi"}, cwd="src")
    assert result.stdout == f"hi {daemon.workspace}/src"
    # Commands get a clean environment: nothing of the daemon's own.
    assert sandbox.commands.run("env").stdout.count("SANDBOX_ID") == 0


@pytest.mark.parametrize("cwd", ["../..", "/", "/etc", "escape-link"])
def test_run_refuses_a_cwd_outside_the_workspace(sandbox: Sandbox, daemon: Daemon, cwd: str) -> None:
    link = os.path.join(daemon.workspace, "escape-link")
    if not os.path.islink(link):
        os.symlink("/", link)
    with pytest.raises(RuntimeError, match=r"PERMISSION_DENIED.*outside the workspace"):
        sandbox.commands.run("pwd", cwd=cwd)


def test_run_with_a_command_timeout_kills_the_whole_group(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    result = sandbox.commands.run(f"sleep {marker} & sleep {marker}; wait", command_timeout=1.5)
    assert (result.exit_code, result.timed_out) == (124, True)
    wait_for(lambda: sleepers(marker) == [], "the command's group to be killed at the deadline")


def test_run_of_a_missing_program_reports_what_a_shell_does(sandbox: Sandbox) -> None:
    result = sandbox.commands.run("no-such-program-here")
    assert result.exit_code == 127
    assert "not found" in result.stderr


def test_run_output_is_bounded_by_the_daemon_and_keeps_the_newest_bytes(sandbox: Sandbox) -> None:
    # 16 MiB through the SDK: the answer keeps the newest bytes that fit its gRPC channel's 4 MiB message limit.
    result = sandbox.commands.run("head -c 16777216 /dev/zero | tr '\\0' a; echo end")
    assert result.exit_code == 0
    assert len(result.stdout) == 4 * 1024 * 1024 - 64 * 1024
    assert result.stdout.endswith("aaaaend\n")
