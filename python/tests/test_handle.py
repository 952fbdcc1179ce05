"""CommandHandle (seed 001) against a real daemon: chunks, offsets, reconnect() and auto-reconnect through a proxy
that cuts or blackholes connections, kill, input, PTY resize, bounded waits."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import sandboxd
from sandboxd import AsyncSandbox, Keepalive, OutputChunk, ProcessStatus, ReconnectPolicy, Sandbox

from .conftest import FAST_RECONNECT
from .support import Daemon, TcpProxy, random_file, sleep_marker, sleepers, wait_for


def joined(chunks: list[OutputChunk], stream: str) -> bytes:
    """The bytes of one stream's chunks, checking they are contiguous from offset 0."""
    expected = 0
    parts = []
    for chunk in chunks:
        if chunk.stream != stream:
            continue
        assert chunk.offset == expected
        expected = chunk.end
        parts.append(chunk.data)
    return b"".join(parts)


def reachable(sandbox: Sandbox) -> bool:
    """Whether a call gets through."""
    try:
        sandbox.processes.list()
    except sandboxd.SandboxUnavailableError:
        return False
    return True


def after_sleep_starts(marker: str, action: Callable[[], object]) -> None:
    """Runs ``action`` on another thread once ``sleep <marker>`` runs."""

    def run() -> None:
        wait_for(lambda: bool(sleepers(marker)), what="the sleep to start")
        action()

    threading.Thread(target=run, daemon=True).start()


def test_runs_a_build_without_waiting_streams_chunks_and_gives_the_result(sandbox: Sandbox, daemon: Daemon) -> None:
    Path(daemon.workspace, "Makefile").write_text("build:\n\t@echo compiling; sleep 0.05\n\t@echo warning: careful >&2; sleep 0.05\n\t@echo linked\n")
    handle = sandbox.start_process("make build")
    chunks = list(handle)
    result = handle.wait()
    assert joined(chunks, "stdout") == b"compiling\nlinked\n" and joined(chunks, "stderr") == b"warning: careful\n"
    # Both streams joined in arrival order: which pipe the daemon reads first on a busy machine is not the sleeps'.
    assert result.exit_code == 0 and sorted(result.output.text.splitlines()) == ["compiling", "linked", "warning: careful"]
    assert (handle.last_stdout_offset, handle.last_stderr_offset) == (17, 17)
    assert handle.status == ProcessStatus.COMPLETED and handle.pid and handle.command_id == handle.process_id


def test_a_late_iterator_replays_what_was_received(sandbox: Sandbox) -> None:
    # "two" waits for a line of input, so the two lines are two chunks however busy the machine is.
    handle = sandbox.start_process("echo one; read line; echo two", stdin=True)
    first = iter(handle)
    assert next(first).data == b"one\n"
    handle.send_input("\n")
    # A second iterator starting now gets the chunk already received, then the rest.
    assert [chunk.data for chunk in handle] == [b"one\n", b"two\n"]
    assert [chunk.data for chunk in first] == [b"two\n"]


def test_kill_signals_the_whole_group_and_leaves_no_process(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    handle = sandbox.start_process(f"sleep {marker} & sleep {marker}; wait")
    wait_for(lambda: len(sleepers(marker)) == 2, what="both sleeps")
    handle.kill()
    result = handle.wait()
    assert (result.signal, result.exit_code, result.status) == ("SIGTERM", 143, ProcessStatus.KILLED)
    wait_for(lambda: not sleepers(marker), what="the group to be gone")
    numbered = sandbox.start_process(f"sleep {marker}")
    numbered.kill(signal.SIGKILL)
    assert numbered.wait().exit_code == 137


def test_send_input_resize_and_close_input_reach_a_pty(sandbox: Sandbox) -> None:
    handle = sandbox.start_process('stty -echo; read line; stty size; echo "got $line"; cat', pty={"cols": 80, "rows": 24})
    assert handle.resize(120, 40).closed is False
    handle.send_input("hello\n")
    handle.send_input(b"tail\n")
    assert handle.close_input().closed is True
    assert "40 120\ngot hello\ntail\n" in handle.wait().stdout.text.replace("\r\n", "\n")


def test_stdin_true_keeps_a_pipe_open_and_concurrent_senders_stay_in_order(sandbox: Sandbox) -> None:
    handle = sandbox.start_process("cat", stdin=True)
    lines = [f"line {n}\n" for n in range(40)]
    acks = [handle.send_input(line) for line in lines[:20]]
    assert [ack.bytes_written for ack in acks] == [sum(len(x) for x in lines[: n + 1]) for n in range(20)]
    threads = [threading.Thread(target=handle.send_input, args=(line,)) for line in lines[20:]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    handle.close_input()
    output = handle.wait().stdout.text
    assert output.startswith("".join(lines[:20])) and sorted(output.splitlines()) == sorted(line.strip() for line in lines)


def test_reconnect_resumes_exactly_at_the_offsets_with_the_earlier_output_in_the_result(sandbox: Sandbox) -> None:
    handle = sandbox.start_process("for i in 1 2 3; do echo tick $i; echo tock $i >&2; sleep 0.1; done")
    before = []
    for chunk in handle:
        before.append(chunk)
        if chunk.stream == "stdout":
            break
    offsets = (handle.last_stdout_offset, handle.last_stderr_offset)
    resumed = handle.reconnect()
    with pytest.raises(sandboxd.SandboxError) as detached:
        list(handle)
    assert detached.value.code == "DETACHED"
    after = list(resumed)
    assert (resumed.last_stdout_offset, resumed.last_stderr_offset) != offsets
    # The new handle yields exactly from the old one's offsets (where its loop left off, though it may have received
    # more meanwhile): nothing the loop got is sent again, and nothing after it is missing.
    assert next(chunk for chunk in after if chunk.stream == "stdout").offset == offsets[0]
    assert next(chunk for chunk in after if chunk.stream == "stderr").offset == offsets[1]
    assert joined(before + after, "stdout") == b"tick 1\ntick 2\ntick 3\n"
    result = resumed.wait()
    assert (result.stdout.text, result.stderr.text) == ("tick 1\ntick 2\ntick 3\n", "tock 1\ntock 2\ntock 3\n")
    assert result.exit_code == 0


def test_reconnect_resumes_where_the_loop_left_off_though_the_handle_received_more(sandbox: Sandbox) -> None:
    handle = sandbox.start_process("echo one; read line; echo two", stdin=True)
    for chunk in handle:
        assert chunk.data == b"one\n"
        break
    handle.send_input("\n")
    # The handle follows on for its result: it receives "two", which no loop of the user's has seen.
    assert handle.wait().stdout == b"one\ntwo\n"
    assert (handle.last_stdout_offset, handle.last_stderr_offset) == (4, 0)
    resumed = handle.reconnect()
    after = list(resumed)
    assert [(chunk.offset, chunk.data) for chunk in after] == [(4, b"two\n")]
    # The result holds each byte once: the first handle's part below offset 4, the rest received again.
    assert resumed.wait().stdout == b"one\ntwo\n"


def test_auto_reconnects_through_a_proxy_cut_many_times_sha256_exact(daemon: Daemon, proxy: TcpProxy) -> None:
    size = 24 * 1024 * 1024
    path = random_file(daemon.workspace, "cuts.bin", size)
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    with sandboxd.connect(proxy.url, token=daemon.token or "", reconnect=FAST_RECONNECT) as sandbox:
        handle = sandbox.start_process("cat cuts.bin; echo done >&2")
        digest = hashlib.sha256()
        received = 0
        stderr = b""
        next_cut = 1024 * 1024
        for chunk in handle:
            if chunk.stream == "stdout":
                digest.update(chunk.data)
                received += len(chunk.data)
            else:
                stderr += chunk.data
            if received >= next_cut:
                # Every MiB, reset the connection under the stream: what was in flight is lost on the wire.
                next_cut += 1024 * 1024
                proxy.cut()
        assert received == size and digest.hexdigest() == expected and stderr == b"done\n"
        assert handle.wait().exit_code == 0 and handle.last_stdout_offset == size
        # The handle reads ahead of its iterator (4 MiB of queue), so the last cuts may find the stream done.
        assert handle.auto_reconnects >= 8 and proxy.cuts >= 8
        print(f"reconnect: {handle.auto_reconnects} reconnects, {proxy.cuts} cuts, {received} bytes verified by sha256")


async def test_async_auto_reconnect_through_cuts(daemon: Daemon, proxy: TcpProxy) -> None:
    size = 8 * 1024 * 1024
    path = random_file(daemon.workspace, "cuts-async.bin", size)
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    async with sandboxd.AsyncSandbox(proxy.url, token=daemon.token or "", reconnect=FAST_RECONNECT) as sandbox:
        handle = await sandbox.start_process("cat cuts-async.bin")
        digest = hashlib.sha256()
        received = 0
        next_cut = 1024 * 1024
        async for chunk in handle:
            digest.update(chunk.data)
            received += len(chunk.data)
            if received >= next_cut:
                # Cut while reading: whatever was in flight is lost and must come again from the offsets.
                next_cut += 1024 * 1024
                proxy.cut()
        assert digest.hexdigest() == expected
        # 7 cuts over 8 MiB, but the handle reads up to 4 MiB ahead of this loop: the later cuts may find
        # the stream already done (seen: 4 reconnects on a loaded machine). The sha256 is the proof.
        assert (await handle.wait()).exit_code == 0 and handle.auto_reconnects >= 2


def test_a_lasting_failure_ends_after_max_attempts_never_a_hang(daemon: Daemon, proxy: TcpProxy) -> None:
    policy = ReconnectPolicy(max_attempts=3, backoff_base=0.01, backoff_max=0.05)
    marker = sleep_marker()
    with sandboxd.connect(proxy.url, token=daemon.token or "", reconnect=policy) as sandbox:
        handle = sandbox.start_process(f"echo up; sleep {marker}")
        for chunk in handle:
            assert chunk.data == b"up\n"
            break
        proxy.refuse(True)
        proxy.cut()
        started = time.monotonic()
        with pytest.raises(sandboxd.SandboxUnavailableError, match="gave up after 3 reconnect attempts"):
            handle.wait()
        assert handle.auto_reconnects == 3 and time.monotonic() - started < 10
        proxy.refuse(False)
        # The process is untouched; once the channel's own connection backoff lets it through again (it fails
        # fast meanwhile), a manual reconnect picks it up.
        wait_for(lambda: reachable(sandbox), what="the daemon to be reachable again")
        again = handle.reconnect()
        again.kill("SIGKILL")
        assert again.wait().exit_code == 137
    assert not sleepers(marker)


def test_never_reconnects_after_kill(daemon: Daemon, proxy: TcpProxy) -> None:
    marker = sleep_marker()
    with sandboxd.connect(proxy.url, token=daemon.token or "", reconnect=FAST_RECONNECT) as sandbox:
        # Ignores SIGTERM and is never escalated, so it still runs when the connection breaks.
        handle = sandbox.start_process(f"trap '' TERM; echo up; sleep {marker}")
        for _ in handle:
            break
        handle.kill("SIGTERM", grace_period=float("inf"))
        proxy.cut()
        with pytest.raises(sandboxd.SandboxError):
            handle.wait()
        assert handle.auto_reconnects == 0
        sandbox.processes.kill(handle.process_id, "SIGKILL")
    wait_for(lambda: not sleepers(marker), what="the sleep to be gone")


def test_a_cut_exec_call_is_unavailable_and_the_daemon_kills_the_command(daemon: Daemon, proxy: TcpProxy) -> None:
    marker = sleep_marker()
    with sandboxd.connect(proxy.url, token=daemon.token or "") as sandbox:
        after_sleep_starts(marker, proxy.cut)
        with pytest.raises(sandboxd.SandboxUnavailableError, match="connection to the sandbox was lost"):
            sandbox.exec(f"sleep {marker}")
    wait_for(lambda: not sleepers(marker), what="the sleep to be killed")


def test_keepalive_finds_a_dead_path_and_the_handle_resumes_on_a_new_connection(daemon: Daemon, proxy: TcpProxy) -> None:
    keepalive = Keepalive(interval=0.5, timeout=1.0)
    with sandboxd.connect(proxy.url, token=daemon.token or "", keepalive=keepalive, reconnect=FAST_RECONNECT) as sandbox:
        handle = sandbox.start_process("for i in $(seq 1 30); do echo tick $i; sleep 0.1; done")
        chunks = iter(handle)
        # What the daemon holds when the stream opens comes as one message: "tick 1" and any tick after it.
        first = next(chunks).data
        assert first.startswith(b"tick 1\n")
        # The open connection goes silent: nothing is reset, bytes just stop. Only the pings can tell.
        assert proxy.blackhole() >= 1
        started = time.monotonic()
        rest = list(chunks)
        assert handle.auto_reconnects >= 1
        assert time.monotonic() - started < 8
        text = first + b"".join(chunk.data for chunk in rest)
        assert text == b"".join(f"tick {i}\n".encode() for i in range(1, 31))


def test_a_dead_path_under_exec_fails_within_the_keepalive_instead_of_hanging(daemon: Daemon, proxy: TcpProxy) -> None:
    marker = sleep_marker()
    with sandboxd.connect(proxy.url, token=daemon.token or "", keepalive=Keepalive(interval=0.5, timeout=1.0)) as sandbox:
        after_sleep_starts(marker, proxy.blackhole)
        started = time.monotonic()
        with pytest.raises(sandboxd.SandboxUnavailableError):
            sandbox.exec(f"sleep {marker}")
        assert time.monotonic() - started < 8
        sandbox.processes.kill_all("SIGKILL")


def test_wait_timeout_bounds_the_wait_only(sandbox: Sandbox) -> None:
    handle = sandbox.start_process("sleep 0.5; echo done")
    with pytest.raises(sandboxd.ExecutionTimeoutError) as timed_out:
        handle.wait(timeout=0.05)
    assert timed_out.value.timeout == 0.05 and isinstance(timed_out.value, TimeoutError)
    assert handle.wait().stdout == b"done\n"


def test_output_the_daemon_dropped_is_output_lost_and_reconnect_continues_after_the_gap() -> None:
    small = Daemon("--max-output-bytes", "65536")
    try:
        with sandboxd.connect(small.url) as sandbox:
            handle = sandbox.start_process("head -c 300000 /dev/zero | tr '\\0' a; echo; echo end")
            wait_for(lambda: handle.refresh() == ProcessStatus.COMPLETED, what="the process to exit")
            # The daemon keeps the head (a quarter of --max-output-bytes here) and the tail: the gap is between.
            head = bytearray()
            with pytest.raises(sandboxd.OutputLostError) as lost:
                for chunk in handle:
                    head += chunk.data
            assert head == b"a" * 16384
            assert (lost.value.stream, lost.value.offset) == ("stdout", len(head)) and lost.value.missed_bytes > 200_000
            assert handle.last_stdout_offset == len(head) + lost.value.missed_bytes
            rest = handle.reconnect().wait()
            assert rest.stdout.text.endswith("a\nend\n") and rest.exit_code == 0
            # Everything but the gap: the head handed over first, then the tail after it.
            assert len(rest.stdout) == 300_005 - lost.value.missed_bytes
    finally:
        small.close()


async def test_async_handle_iterates_waits_and_kills(async_sandbox: AsyncSandbox) -> None:
    marker = sleep_marker()
    handle = await async_sandbox.start_process(f"echo ready; sleep {marker}")
    async for chunk in handle:
        assert chunk.data == b"ready\n"
        break
    await handle.kill("SIGKILL")
    result = await handle.wait()
    assert (result.exit_code, result.signal) == (137, "SIGKILL")
    assert not sleepers(marker)
