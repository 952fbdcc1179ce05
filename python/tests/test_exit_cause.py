"""Why a command ended, as the SDK reports it: ``ExitCause`` on every exit, with its detail."""

from __future__ import annotations

from sandboxd import ExitCause, ProcessStatus, Sandbox

from .support import sleep_marker, sleepers, wait_for


def test_exec_says_exited_timed_out_and_start_failed_with_its_stage(sandbox: Sandbox) -> None:
    result = sandbox.exec("exit 5")
    assert (result.exit_code, result.cause) == (5, ExitCause.EXITED)
    timed_out = sandbox.exec(f"sleep {sleep_marker()}", timeout=0.3)
    assert (timed_out.cause, timed_out.timed_out, timed_out.signal) == (ExitCause.TIMED_OUT, True, "SIGKILL")
    missing = sandbox.exec(["no-such-program-python-cause", "x"])
    assert (missing.exit_code, missing.status, missing.cause) == (127, ProcessStatus.ERROR, ExitCause.START_FAILED)
    assert (missing.exit.start_stage, missing.exit.errno) == ("exec", "ENOENT")


def test_a_kill_through_the_handle_is_killed_on_request_and_a_siblings_signal_is_signaled(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    killed = sandbox.start_process(f"sleep {marker}")
    wait_for(lambda: len(sleepers(marker)) == 1, what="the sleep")
    killed.kill()
    result = killed.wait()
    assert (result.cause, result.exit.kill_origin, result.signal) == (ExitCause.KILLED_ON_REQUEST, "kill_process", "SIGTERM")
    assert killed.cause == ExitCause.KILLED_ON_REQUEST

    other = sleep_marker()
    signaled = sandbox.start_process(["sleep", other])
    wait_for(lambda: len(sleepers(other)) == 1, what="the other sleep")
    # A sibling command inside the sandbox sends the signal: the daemon sent nothing.
    assert sandbox.exec(f"kill -TERM {sleepers(other)[0]}").exit_code == 0
    ended = signaled.wait()
    assert (ended.cause, ended.signal, ended.exit_code, ended.exit.kill_origin) == (ExitCause.SIGNALED, "SIGTERM", 143, None)
