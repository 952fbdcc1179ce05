"""Cancellation kills the remote command: task cancel, KeyboardInterrupt, leaving a with/async with block, close()."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess

import pytest

import sandboxd
from sandboxd import AsyncSandbox, Sandbox

from .support import Daemon, TcpProxy, async_wait_for, sleep_marker, sleepers, spawn_python, wait_for

# A child interpreter that runs a command, is interrupted with SIGINT (Ctrl-C) while it waits, and then, still
# connected, watches /proc for the command to disappear: so the kill comes from the cancelled call, not from the
# connection closing when the program ends.
_INTERRUPTED = """
import faulthandler, os, signal, sys, threading, time, sandboxd
url, token, marker, mode, delivery = sys.argv[1:6]
# SIGUSR1 prints every thread's stack to stderr: what the test shows when this child does not finish in time.
faulthandler.register(signal.SIGUSR1, all_threads=True)
# Ctrl-C raises KeyboardInterrupt even when this suite runs in the background of a script (run-all.sh), where the
# shell starts it with SIGINT ignored and the child would inherit that.
signal.signal(signal.SIGINT, signal.default_int_handler)

def gone():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/cmdline", "rb").read() == f"sleep\\0{marker}\\0".encode():
                return False
        except OSError:
            pass
    return True

def main_thread_asleep():
    with open(f"/proc/self/task/{os.getpid()}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "S"

def interrupt_from_another_thread():
    # Once the command runs and the main thread has slept in its wait for 0.2 s, SIGINT reaches this thread: CPython
    # runs the handler on the main thread only, and the C handler caught here does not wake a lock wait there.
    asleep = 0
    while asleep < 20:
        time.sleep(0.01)
        asleep = asleep + 1 if not gone() and main_thread_asleep() else 0
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

if delivery == "thread":
    threading.Thread(target=interrupt_from_another_thread, daemon=True).start()

with sandboxd.connect(url, token=token) as sandbox:
    try:
        if mode == "exec":
            sandbox.exec(f"sleep {marker}")
        elif mode == "stream":
            for event in sandbox.exec_stream(f"echo up; sleep {marker}"):
                pass
        else:
            with sandbox.start_process(f"sleep {marker}") as handle:
                handle.wait()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        deadline = time.monotonic() + 10
        while not gone() and time.monotonic() < deadline:
            time.sleep(0.02)
        print("gone" if gone() else "still running", sandbox.status, flush=True)
"""


@pytest.mark.parametrize(
    ("mode", "delivery"), [("exec", "process"), ("stream", "process"), ("handle", "process"), ("exec", "thread"), ("handle", "thread")]
)
def test_keyboard_interrupt_kills_the_remote_command(daemon: Daemon, mode: str, delivery: str) -> None:
    """Ctrl-C during a sync call kills the command, also when the signal lands on a thread other than the waiting
    one (the kernel's choice, or just before the wait began)."""
    marker = sleep_marker()
    child = spawn_python(_INTERRUPTED, daemon.url, daemon.token or "", marker, mode, delivery)
    try:
        wait_for(lambda: len(sleepers(marker)) == 1, timeout=30, what="the command to start")
        if delivery == "process":
            child.send_signal(signal.SIGINT)
        try:
            stdout, stderr = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.communicate(timeout=2)
            child.kill()
            stdout, stderr = child.communicate()
            pytest.fail(f"the interrupted child did not finish in 30 s; its output {stdout!r}, its threads:\n{stderr}")
    finally:
        if child.poll() is None:
            child.kill()
    assert stdout == "interrupted\ngone running\n", stderr
    assert child.returncode == 0
    assert not sleepers(marker)


async def test_cancelling_a_start_whose_answer_never_came_kills_the_started_process(daemon: Daemon, proxy: TcpProxy) -> None:
    marker = sleep_marker()
    async with AsyncSandbox(proxy.url, token=daemon.token or "") as sandbox:
        await sandbox.processes.list()
        # The request reaches the daemon, which starts the command; its answer never comes back.
        proxy.mute_answers(True)
        start = asyncio.create_task(sandbox.start_process(f"sleep {marker}"))
        await async_wait_for(lambda: len(sleepers(marker)) == 1, what="the daemon to start the command")
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
        # Nobody holds a handle of it: the cancelled start killed it.
        await async_wait_for(lambda: not sleepers(marker), what="the unclaimed command to be killed")
        proxy.mute_answers(False)


async def test_cancelling_the_task_kills_the_remote_command(async_sandbox: AsyncSandbox) -> None:
    marker = sleep_marker()
    task = asyncio.create_task(async_sandbox.exec(f"sleep {marker}"))
    await asyncio.to_thread(wait_for, lambda: len(sleepers(marker)) == 1, what="the sleep to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.to_thread(wait_for, lambda: not sleepers(marker), what="the cancelled sleep to be gone")


async def test_asyncio_timeout_around_exec_kills_the_remote_command(async_sandbox: AsyncSandbox) -> None:
    marker = sleep_marker()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await async_sandbox.exec(f"sleep {marker}")
    await asyncio.to_thread(wait_for, lambda: not sleepers(marker), what="the sleep to be gone")


async def test_closing_an_exec_stream_kills_the_command(async_sandbox: AsyncSandbox) -> None:
    marker = sleep_marker()
    async with contextlib.aclosing(async_sandbox.exec_stream(f"echo up; sleep {marker}")) as events:
        async for event in events:
            if event.type == "stdout":
                break
    await asyncio.to_thread(wait_for, lambda: not sleepers(marker), what="the sleep to be gone")


def test_leaving_a_with_block_kills_the_process(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    with pytest.raises(RuntimeError, match="boom"):
        with sandbox.start_process(f"sleep {marker} & sleep {marker}; wait") as handle:
            wait_for(lambda: len(sleepers(marker)) == 2, what="both sleeps")
            raise RuntimeError("boom")
    # Leaving waits for the exit: the group is gone by now.
    assert not sleepers(marker)
    assert handle.refresh() == sandboxd.ProcessStatus.KILLED


async def test_leaving_an_async_with_block_kills_the_process(async_sandbox: AsyncSandbox) -> None:
    marker = sleep_marker()
    async with await async_sandbox.start_process(f"trap '' TERM; sleep {marker}") as handle:
        await asyncio.to_thread(wait_for, lambda: len(sleepers(marker)) == 1, what="the sleep")
    # SIGTERM was ignored: the daemon escalated to SIGKILL after the 1 s grace period.
    assert not sleepers(marker)
    assert handle.status == sandboxd.ProcessStatus.KILLED


def test_a_with_block_on_a_finished_process_leaves_quietly(sandbox: Sandbox) -> None:
    with sandbox.start_process("echo done") as handle:
        assert handle.wait().stdout == b"done\n"
    assert handle.exit_code == 0


def test_closing_the_sandbox_leaves_its_processes_running_unless_asked_to_kill_them(daemon: Daemon) -> None:
    kept, killed = sleep_marker(), sleep_marker()
    with sandboxd.connect(daemon.url, token=daemon.token or "") as first:
        # A dev server a script starts must outlive the script, whether it leaves the block or just exits.
        survivor = first.start_process(f"sleep {kept}").process_id
        wait_for(lambda: len(sleepers(kept)) == 1, what="the sleep")
    assert first.status == sandboxd.SandboxStatus.CLOSED
    with sandboxd.connect(daemon.url, token=daemon.token or "") as second:
        # Several round trips after close(): a kill it had sent would have ended the sleep by now.
        assert second.exec("true").exit_code == 0
        kept_handle = second.processes.get(survivor)
        assert kept_handle is not None and kept_handle.status == sandboxd.ProcessStatus.RUNNING
        assert len(sleepers(kept)) == 1
        second.processes.kill(survivor, "SIGKILL")
        second.start_process(f"sleep {killed}")
        wait_for(lambda: len(sleepers(killed)) == 1, what="the second sleep")
        second.close(kill_processes=True)
    wait_for(lambda: not sleepers(kept), what="the kept sleep to be killed")
    wait_for(lambda: not sleepers(killed), what="close(kill_processes=True) to kill the sandbox's process")
