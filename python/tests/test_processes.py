"""Process management (seed 000) and the lifecycle (seed 002) against a real daemon."""

from __future__ import annotations

import pytest

import sandboxd
from sandboxd import AsyncSandbox, ProcessStatus, Sandbox, SandboxStatus

from .support import Daemon, sleep_marker, sleepers, wait_for


def test_list_get_attach_kill_and_logs(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    server = sandbox.start_process(f"echo listening; echo warming >&2; sleep {marker}", process_id=f"server-{marker}")
    wait_for(lambda: len(sleepers(marker)) == 1, what="the server")
    listed = sandbox.processes.list(status=[ProcessStatus.RUNNING])
    assert [handle.process_id for handle in listed] == [server.process_id]
    got = sandbox.processes.get(server.process_id)
    assert got is not None and got.pid == server.pid and got.status == ProcessStatus.RUNNING
    assert got.info is not None and got.info.command == f"echo listening; echo warming >&2; sleep {marker}"
    logs = sandbox.processes.logs(server.process_id)
    assert (logs.stdout.text, logs.stderr.text, logs.stdout_offset) == ("listening\n", "warming\n", 0)
    attached = sandbox.processes.attach(server.process_id, stdout_offset=5)
    sandbox.processes.kill(server.process_id, "SIGKILL")
    result = attached.wait()
    assert (result.exit_code, result.stdout) == (137, b"ning\n")
    assert [handle.process_id for handle in sandbox.processes.list(status=["killed"])] == [server.process_id]
    assert server.wait().signal == "SIGKILL"


def test_unknown_ids(sandbox: Sandbox) -> None:
    assert sandbox.processes.get("no-such-process") is None
    for call in (lambda: sandbox.processes.kill("no-such-process"), lambda: sandbox.processes.logs("no-such-process")):
        with pytest.raises(sandboxd.ProcessNotFoundError) as missing:
            call()
        assert missing.value.process_id == "no-such-process" and missing.value.code == "NOT_FOUND"
    with pytest.raises(sandboxd.ProcessNotFoundError):
        sandbox.processes.attach("no-such-process")


def test_a_duplicate_live_process_id_is_process_already_exists(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    first = sandbox.start_process(f"sleep {marker}", process_id=f"dup-{marker}")
    with pytest.raises(sandboxd.ProcessAlreadyExistsError) as duplicate:
        sandbox.start_process("true", process_id=f"dup-{marker}")
    assert duplicate.value.process_id == f"dup-{marker}"
    assert duplicate.value.rpc_error is not None
    first.kill("SIGKILL")
    first.wait()
    # An exited record's id may be taken again.
    assert sandbox.start_process("echo again", process_id=f"dup-{marker}").wait().stdout == b"again\n"


def test_kill_all_counts_live_processes_and_cleanup_exited_records(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    done = sandbox.start_process("true", auto_cleanup=False)
    done.wait()
    live = [sandbox.start_process(f"sleep {marker}") for _ in range(3)]
    wait_for(lambda: len(sleepers(marker)) == 3, what="three sleeps")
    assert sandbox.processes.kill_all("SIGKILL") == 3
    for handle in live:
        assert handle.wait().exit_code == 137
    assert sandbox.processes.cleanup() >= 1
    assert sandbox.processes.get(done.process_id) is None
    assert sandbox.processes.kill_all() == 0


def test_sessions_scope_list_and_kill_all(sandbox: Sandbox, daemon: Daemon) -> None:
    marker = sleep_marker()
    with sandboxd.connect(daemon.url, token=daemon.token or "") as other:
        theirs = other.start_process(f"sleep {marker}")
        mine = sandbox.start_process(f"sleep {marker}")
        wait_for(lambda: len(sleepers(marker)) == 2, what="both sleeps")
        assert [handle.process_id for handle in sandbox.processes.list()] == [mine.process_id]
        everyone = {handle.process_id for handle in sandbox.processes.list(all=True)}
        assert {theirs.process_id, mine.process_id} <= everyone
        assert sandbox.processes.kill_all("SIGKILL") == 1
        assert mine.wait().exit_code == 137
        assert theirs.refresh() == ProcessStatus.RUNNING
        other.close(kill_processes=True)
    wait_for(lambda: not sleepers(marker), what="the other sandbox's sleep to be killed at its close")


def status(sandbox: Sandbox) -> SandboxStatus:
    """The sandbox's status (a call, so a type checker does not carry one comparison over to the next)."""
    return sandbox.status


def test_lifecycle_follows_seed_002(daemon: Daemon) -> None:
    sandbox = sandboxd.Sandbox(daemon.url, token=daemon.token or "", sandbox_id="lifecycle1", timeout=12.5)
    assert status(sandbox) == SandboxStatus.INIT
    with pytest.raises(sandboxd.SandboxError) as not_running:
        sandbox.exec("true")
    assert not_running.value.code == "NOT_RUNNING"
    sandbox.start()
    assert sandbox.describe() == {
        "sandbox_id": "lifecycle1",
        "status": SandboxStatus.RUNNING,
        "workspace": [],
        "timeout": 12.5,
        "session_id": "lifecycle1",
        "url": daemon.url,
    }
    marker = sleep_marker()
    sandbox.start_process(f"sleep {marker}")
    wait_for(lambda: len(sleepers(marker)) == 1, what="the sleep")
    sandbox.stop()
    assert status(sandbox) == SandboxStatus.IDLE
    wait_for(lambda: not sleepers(marker), what="stop() to kill the sandbox's processes")
    sandbox.start()
    assert sandbox.exec("echo back").stdout == b"back\n"
    sandbox.close()
    assert status(sandbox) == SandboxStatus.CLOSED
    with pytest.raises(sandboxd.SandboxError) as invalid:
        sandbox.start()
    assert invalid.value.code == "INVALID_TRANSITION"
    sandbox.close()


async def test_async_process_management(async_sandbox: AsyncSandbox) -> None:
    handle = await async_sandbox.start_process("cat", stdin=True)
    assert (await handle.send_input("abc")).bytes_written == 3
    await handle.close_input()
    assert (await handle.wait()).stdout == b"abc"
    got = await async_sandbox.processes.get(handle.process_id)
    assert got is not None and got.exit_code == 0
    assert (await async_sandbox.processes.logs(handle.process_id)).stdout == b"abc"

