"""The portal under interruption: what a KeyboardInterrupt in the calling thread does to the call on the loop."""

from __future__ import annotations

import _thread
import asyncio
import faulthandler
import signal
import threading
from collections.abc import Iterator

import pytest

from sandboxd._portal import Portal


@pytest.fixture(autouse=True)
def _watchdog() -> Iterator[None]:
    """An interruption that is never seen would block the main thread for good: end the run with its stack instead.
    SIGINT raises KeyboardInterrupt meanwhile, also where the suite runs with it ignored (in a script's background)."""
    faulthandler.dump_traceback_later(60, exit=True)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
    faulthandler.cancel_dump_traceback_later()


def _interrupt_when(started: threading.Event) -> None:
    """Raises KeyboardInterrupt in the main thread (as Ctrl-C does) once ``started`` is set."""

    def interrupt() -> None:
        started.wait()
        _thread.interrupt_main()

    threading.Thread(target=interrupt, daemon=True).start()


def test_an_interrupted_call_is_cancelled_on_the_loop() -> None:
    portal = Portal.shared()
    started = threading.Event()
    outcome: list[str] = []

    async def long_call() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return "finished"

    _interrupt_when(started)
    with pytest.raises(KeyboardInterrupt):
        portal.call(long_call)
    assert outcome == ["cancelled"]


def test_a_result_that_beats_the_cancel_is_released() -> None:
    # The call finishes while the interruption unwinds it (its answer arrived before the cancel did): nobody will
    # ever hold the result, so the portal releases it (a started process is killed).
    portal = Portal.shared()
    started = threading.Event()
    released: list[str] = []

    async def start() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return "a started process"
        return "unreachable"

    async def release(result: str) -> None:
        released.append(result)

    _interrupt_when(started)
    with pytest.raises(KeyboardInterrupt):
        portal.call_owned(start, release)
    assert released == ["a started process"]


def test_a_result_that_comes_after_the_unwind_gave_up_is_released_when_it_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    import sandboxd._portal as portal_module

    monkeypatch.setattr(portal_module, "_UNWIND_SECONDS", 0.1)
    portal = Portal.shared()
    started = threading.Event()
    released = threading.Event()
    results: list[str] = []

    async def slow_to_unwind() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            # Its answer is still on the way when the caller stops waiting for the unwind.
            await asyncio.sleep(0.5)
            return "a process started late"
        return "unreachable"

    async def release(result: str) -> None:
        results.append(result)
        released.set()

    _interrupt_when(started)
    with pytest.raises(KeyboardInterrupt):
        portal.call_owned(slow_to_unwind, release)
    assert released.wait(10)
    assert results == ["a process started late"]
