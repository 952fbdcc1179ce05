"""The daemon's head and tail: what the SDK sends (retention) and what it says was dropped, against a real daemon."""

from __future__ import annotations

import pytest

from sandboxd import AsyncSandbox, InvalidArgumentError, OutputGap, OutputRetention, Sandbox

from .support import wait_for


def seq_bytes(last: int) -> bytes:
    """What ``seq 1 <last>`` prints."""
    return "".join(f"{n}\n" for n in range(1, last + 1)).encode()


def test_logs_return_the_head_the_tail_and_the_one_gap_between(sandbox: Sandbox) -> None:
    expected = seq_bytes(50_000)
    handle = sandbox.start_process("seq 1 50000", auto_cleanup=False, retention={"head_bytes": 500, "tail_bytes": 5000})
    # Not handle.wait(): a handle that lags behind so small a tail meets the gap (OutputLostError).
    def exited() -> bool:
        info = sandbox.processes.logs(handle.process_id).process
        return info is not None and info.exit is not None

    wait_for(exited, what="the exit")
    logs = sandbox.processes.logs(handle.process_id)
    assert len(logs.dropped) == 1
    gap = logs.dropped[0]
    assert (gap.stream, gap.offset) == ("stdout", 500)
    tail_from = gap.offset + gap.missed_bytes
    assert logs.stdout_offset == tail_from
    assert len(expected) - tail_from <= 5000
    assert logs.stdout_head == expected[:500]
    assert logs.stdout == expected[tail_from:]
    assert logs.stderr_head == b"" and logs.stderr == b""
    assert logs.truncated
    assert logs.process is not None and logs.process.retention == OutputRetention(head_bytes=500, tail_bytes=5000)
    assert logs.process.exit is not None and logs.process.exit.dropped == (gap,)


def test_nothing_is_dropped_while_everything_fits(sandbox: Sandbox) -> None:
    handle = sandbox.start_process("seq 1 100", auto_cleanup=False)
    handle.wait()
    logs = sandbox.processes.logs(handle.process_id)
    assert logs.stdout == seq_bytes(100)
    assert logs.stdout_head == b"" and logs.dropped == () and not logs.truncated


def test_exec_keeps_every_byte_and_a_bounded_result_says_what_it_did_not_keep(sandbox: Sandbox) -> None:
    result = sandbox.exec("seq 1 200000")
    assert result.stdout == seq_bytes(200_000)
    assert result.dropped == () and result.exit.dropped == ()
    handle = sandbox.start_process("seq 1 1000", max_retained_bytes=100)
    bounded = handle.wait()
    expected = seq_bytes(1000)
    assert bounded.dropped == (OutputGap("stdout", 0, len(expected) - len(bounded.stdout)),)
    assert expected.endswith(bounded.stdout)


def test_a_retention_above_the_cap_or_of_the_wrong_shape_is_refused(sandbox: Sandbox) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        sandbox.start_process("true", retention={"head_bytes": 1 << 40})
    assert refused.value.reason == "RETENTION_ABOVE_LIMIT"
    with pytest.raises(InvalidArgumentError, match="retention.tail_bytes"):
        sandbox.start_process("true", retention={"tail_bytes": -1})


async def test_async_logs_say_the_same(async_sandbox: AsyncSandbox) -> None:
    handle = await async_sandbox.start_process("seq 1 20000", auto_cleanup=False, retention={"head_bytes": 10, "tail_bytes": 1000})
    await handle.wait_for_exit(timeout=30)
    logs = await async_sandbox.processes.logs(handle.process_id)
    assert logs.process is not None and logs.process.exit is not None
    expected = seq_bytes(20_000)
    assert logs.stdout_head == expected[:10]
    assert logs.dropped == (OutputGap("stdout", 10, logs.stdout_offset - 10),)
    assert logs.stdout == expected[logs.stdout_offset :]
