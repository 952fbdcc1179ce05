"""exec() and exec_stream() against a real daemon: seed 004's {exit_code, output}, seed 000's streaming events."""

from __future__ import annotations

import hashlib
import math
import os

import pytest

import sandboxd
from sandboxd import AsyncSandbox, CommandResult, ProcessStatus, Sandbox

from .support import Daemon, random_file, sleep_marker, sleepers, wait_for


def test_exec_returns_exit_code_and_joined_output_in_arrival_order(sandbox: Sandbox) -> None:
    result = sandbox.exec("echo hello && sleep 0.05 && echo oops >&2 && sleep 0.05 && echo again && exit 3")
    assert isinstance(result, CommandResult)
    assert result.exit_code == 3
    assert result.output == b"hello\noops\nagain\n"
    assert result.stdout == b"hello\nagain\n" and result.stderr == b"oops\n"
    assert result.output.text == "hello\noops\nagain\n"
    assert result.stdout.lines() == ["hello", "again"]
    assert (result.success, result.status, result.signal, result.timed_out) == (False, ProcessStatus.FAILED, None, False)
    assert result.command.startswith("echo hello") and result.duration > 0.09
    assert result.session_id == sandbox.session_id


def test_exec_takes_argv_env_cwd_and_stdin(sandbox: Sandbox, daemon: Daemon) -> None:
    os.makedirs(os.path.join(daemon.workspace, "sub"), exist_ok=True)
    argv = sandbox.exec(["sh", "-c", 'printf "%s|%s|%s" "$GREETING" "$(pwd)" "$0"', "arg zero"], env={"GREETING": "hi there"}, cwd="sub")
    assert argv.stdout.text == f"hi there|{daemon.workspace}/sub|arg zero"
    # One program without arguments runs exactly that program, not a shell word split.
    assert sandbox.exec(["pwd"]).stdout.text == daemon.workspace + "\n"
    assert sandbox.exec("wc -c", stdin=b"\x00\x01\x02").stdout.text.strip() == "3"
    assert sandbox.exec("cat", stdin="héllo").stdout.text == "héllo"


def test_pty_merges_stderr_into_stdout(sandbox: Sandbox) -> None:
    result = sandbox.exec("echo out; echo err >&2; test -t 1 && echo tty; stty size", pty={"cols": 100, "rows": 30})
    assert result.stderr == b""
    assert result.stdout.text.replace("\r\n", "\n") == "out\nerr\ntty\n30 100\n"
    assert result.output == result.stdout


def test_timeout_is_data_and_leaves_no_process(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    # Long enough for the shell to print its line on a busy machine, where 0.3 s was not always.
    result = sandbox.exec(f"echo before; sleep {marker}", timeout=2)
    assert (result.exit_code, result.signal, result.timed_out, result.status) == (137, "SIGKILL", True, ProcessStatus.KILLED)
    assert result.stdout == b"before\n"
    wait_for(lambda: not sleepers(marker), what="the timed-out sleep to be gone")


def test_binary_output_is_sha256_exact(sandbox: Sandbox, daemon: Daemon) -> None:
    path = random_file(daemon.workspace, "random.bin", 12 * 1024 * 1024 + 7)
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    result = sandbox.exec(["cat", "random.bin"])
    assert result.exit_code == 0
    assert len(result.stdout) == path.stat().st_size
    assert hashlib.sha256(result.stdout).hexdigest() == expected
    # And through a background handle's chunks, offset by offset.
    handle = sandbox.start_process("cat random.bin >&2")
    digest = hashlib.sha256()
    next_offset = 0
    for chunk in handle:
        assert (chunk.stream, chunk.offset) == ("stderr", next_offset)
        digest.update(chunk.data)
        next_offset = chunk.end
    assert digest.hexdigest() == expected
    assert handle.wait().exit_code == 0 and handle.last_stderr_offset == path.stat().st_size


def test_missing_program_is_exit_127_and_a_refused_command_an_error(sandbox: Sandbox) -> None:
    assert sandbox.exec(["no-such-program-xyz", "a"]).exit_code == 127
    with pytest.raises(sandboxd.InvalidArgumentError):
        sandbox.exec("")


def test_client_side_validation_happens_before_any_call(sandbox: Sandbox) -> None:
    with pytest.raises(sandboxd.InvalidArgumentError):
        sandbox.exec("true", timeout=-1)
    with pytest.raises(sandboxd.InvalidArgumentError):
        sandbox.exec([])
    with pytest.raises(sandboxd.InvalidArgumentError):
        sandbox.exec("true", encoding="no-such-encoding")
    with pytest.raises(sandboxd.InvalidArgumentError, match="outside the sandbox's workspace"):
        sandbox.exec("true", cwd="/")


def test_exec_stream_yields_start_output_and_complete(sandbox: Sandbox) -> None:
    # Asked to keep its output, the complete event's result has it all, as exec()'s does.
    command = "printf 'caf\\303'; sleep 0.05; printf '\\251\\n'; echo warn >&2; exit 2"
    events = list(sandbox.exec_stream(command, max_retained_bytes=math.inf))
    assert events[0].type == "start" and events[0].process_id
    assert events[-1].type == "complete" and events[-1].exit_code == 2
    assert events[-1].result is not None and events[-1].result.output.text == "café\nwarn\n"
    stdout = [event for event in events if event.type == "stdout"]
    # The split character is never broken: text arrives once it is whole.
    assert "".join(event.text for event in stdout) == "café\n"
    assert b"".join(event.data for event in stdout) == "café\n".encode()
    assert [event.text for event in events if event.type == "stderr"] == ["warn\n"]


def test_exec_stream_keeps_nothing_it_handed_over_by_default(sandbox: Sandbox) -> None:
    received = 0
    result = None
    for event in sandbox.exec_stream("head -c 3000000 /dev/zero"):
        received += len(event.data)
        if event.type == "complete":
            result = event.result
    assert received == 3_000_000
    # The result has the exit, not a second copy of the output the loop already had.
    assert result is not None and result.exit_code == 0
    assert result.stdout == b"" and result.output == b""
    assert result.dropped_bytes == {"stdout": 3_000_000, "stderr": 0}


def test_exec_stream_hands_over_output_that_arrived_before_the_loop_asked(sandbox: Sandbox) -> None:
    texts: list[str] = []
    for event in sandbox.exec_stream("printf early"):
        if event.type == "start":
            process_id = event.process_id
            assert process_id is not None

            def sent() -> bool:
                # The daemon lets go of an Exec's output once it has sent the output and the exit.
                logs = sandbox.processes.logs(process_id)
                return logs.stdout == b"" and logs.stdout_offset == len("early")

            wait_for(sent, what="the daemon to send everything")
        if event.type == "stdout":
            texts.append(event.text)
    assert "".join(texts) == "early"


def test_exec_result_holds_its_output_once(sandbox: Sandbox) -> None:
    result = sandbox.exec("head -c 100000 /dev/zero")
    # With one stream, the joined output is the same bytes object, not a copy.
    assert result.output is result.stdout and len(result.stdout) == 100_000


def test_leaving_an_exec_stream_early_kills_the_command(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    for event in sandbox.exec_stream(f"echo up; sleep {marker}"):
        if event.type == "stdout":
            wait_for(lambda: len(sleepers(marker)) == 1, what="the sleep to start")
            break
    wait_for(lambda: not sleepers(marker), what="the sleep to be killed")


async def test_async_exec_and_stream(async_sandbox: AsyncSandbox) -> None:
    result = await async_sandbox.exec(["sh", "-c", "echo hi; echo there >&2; exit 4"])
    assert (result.exit_code, result.output, result.stderr) == (4, b"hi\nthere\n", b"there\n")
    kinds = [event.type async for event in async_sandbox.exec_stream("echo a; echo b >&2")]
    assert kinds[0] == "start" and kinds[-1] == "complete" and sorted(kinds[1:-1]) == ["stderr", "stdout"]


async def test_async_slow_consumer_gets_every_byte(async_sandbox: AsyncSandbox) -> None:
    import asyncio

    size = 6 * 1024 * 1024
    received = 0
    async for event in async_sandbox.exec_stream(f"head -c {size} /dev/zero"):
        if event.type == "stdout":
            received += len(event.data)
            if received < 1024 * 1024:
                await asyncio.sleep(0.01)
    assert received == size
