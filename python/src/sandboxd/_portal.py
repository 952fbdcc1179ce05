"""Portal: an event loop on a thread of its own, where the sync API runs the asyncio core."""

from __future__ import annotations

import asyncio
import contextlib
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import ParamSpec, TypeVar

from .errors import SandboxError

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: How long a call interrupted in the calling thread (KeyboardInterrupt) waits for its work to unwind in the loop,
#: which cancels its RPC (and so kills an Exec command), in seconds.
_UNWIND_SECONDS = 10.0

#: How often a thread waiting on the loop wakes to let Python run a signal handler that is due, in seconds. An
#: untimed lock wait is not woken by a signal that CPython's C handler caught on another thread, or on this one just
#: before the wait began: Ctrl-C would then go unseen until the call ended (a command that runs for an hour).
_SIGNAL_CHECK_SECONDS = 0.05


class _End:
    """The end of an async iterator, passed back instead of StopAsyncIteration."""


_END = _End()


class Portal:
    """Portal runs coroutines on its own event loop thread for callers in other threads, as anyio's blocking portal
    does, with the one thing the sync API needs on top: when the calling thread is interrupted while it waits (a
    KeyboardInterrupt, or any exception raised into it), the coroutine is cancelled and its cleanup awaited before
    the interruption goes on, so an Exec call is cancelled and the daemon kills its command.

    Every sync Sandbox of a process shares one portal (:meth:`shared`), whose daemon thread lives as long as the
    process: grpc.aio's completion queue poller outlives a channel's close and posts to the loop it ran on, which
    must not be closed under it.
    """

    _shared: Portal | None = None
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls) -> Portal:
        """The process's portal, started on first use (and again in a child after a fork)."""
        with cls._shared_lock:
            if cls._shared is None or not cls._shared._thread.is_alive():
                cls._shared = cls()
            return cls._shared

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="sandboxd-loop", daemon=True)
        self._stopped = False
        #: Releases running on the loop for calls whose callers gave up waiting (kept referenced until done).
        self._background: set[asyncio.Task[object]] = set()
        self._thread.start()

    def call(self, function: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Runs ``function(*args, **kwargs)`` on the loop and returns its result (or raises its exception)."""
        return self._call(function, None, *args, **kwargs)

    def call_owned(
        self, function: Callable[_P, Awaitable[_T]], release: Callable[[_T], Awaitable[object]], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """As :meth:`call`, for a result the caller must own (a process it started): when the calling thread is
        interrupted after the coroutine finished but before its result was handed over, ``release(result)`` runs
        on the loop (bounded), since nobody else holds the result."""
        return self._call(function, release, *args, **kwargs)

    def _call(
        self,
        function: Callable[_P, Awaitable[_T]],
        release: Callable[[_T], Awaitable[object]] | None,
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("the sync sandboxd API was called from its own event loop thread; use AsyncSandbox there")
        if self._stopped:
            raise SandboxError("the sandbox is closed", code="NOT_RUNNING")
        done: concurrent.futures.Future[_T] = concurrent.futures.Future()
        tasks: list[asyncio.Task[_T]] = []

        async def run() -> _T:
            return await function(*args, **kwargs)

        def start() -> None:
            task = self._loop.create_task(run())
            tasks.append(task)
            task.add_done_callback(lambda finished: _transfer(finished, done))

        def cancel() -> None:
            # Callbacks run in order: a start scheduled before this one has made its task by now. None was
            # scheduled when the interruption came inside call_soon_threadsafe, before it queued the start.
            if tasks:
                tasks[0].cancel()
            else:
                done.cancel()

        try:
            # Inside the try: an interruption that lands while the start is being queued (the loop may already
            # be running it) cancels it like one that lands in the wait.
            self._loop.call_soon_threadsafe(start)
            while not done.done():
                concurrent.futures.wait((done,), timeout=_SIGNAL_CHECK_SECONDS)
            return done.result()
        except BaseException:
            if not done.done():
                try:
                    self._loop.call_soon_threadsafe(cancel)
                    done.exception(timeout=_UNWIND_SECONDS)
                except BaseException:  # noqa: S110 - the interruption below is what the caller gets
                    pass
            if release is not None and not done.done():
                # Still unwinding after the wait: whatever result comes later is released then, on the loop.
                done.add_done_callback(lambda finished: self._release_later(finished, release))
            elif release is not None and not done.cancelled() and done.exception() is None:
                # Finished (before the interruption, or before the cancel reached it), but the result never reached
                # the caller: release it.
                released = asyncio.run_coroutine_threadsafe(_awaited(release(done.result())), self._loop)
                try:
                    released.result(timeout=_UNWIND_SECONDS)
                except BaseException:  # noqa: S110 - the interruption below is what the caller gets
                    pass
            raise

    def _release_later(self, finished: concurrent.futures.Future[_T], release: Callable[[_T], Awaitable[object]]) -> None:
        """Releases the result of a call its caller gave up on, once it came: on the loop, from whichever thread
        set it (or this one, when it came just as the callback was added)."""
        if finished.cancelled() or finished.exception() is not None:
            return

        def start() -> None:
            task = self._loop.create_task(_awaited(release(finished.result())))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

        with contextlib.suppress(RuntimeError):  # the loop has stopped: nothing can run the release
            self._loop.call_soon_threadsafe(start)

    def iterate(self, iterator: AsyncIterator[_T]) -> Iterator[_T]:
        """Iterates an async iterator from this thread; closing the sync iterator (``break``) closes it in the loop."""

        async def next_item() -> _T | _End:
            try:
                return await anext(iterator)
            except StopAsyncIteration:
                return _END

        try:
            while True:
                item = self.call(next_item)
                if isinstance(item, _End):
                    return
                yield item
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None and not self._stopped:
                self.call(close)

    def stop(self) -> None:
        """Stops the loop (cancelling what still runs on it) and joins its thread."""
        if self._stopped or threading.current_thread() is self._thread:
            return
        self._stopped = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()


async def _awaited(awaitable: Awaitable[object]) -> object:
    return await awaitable


def _transfer(task: asyncio.Task[_T], done: concurrent.futures.Future[_T]) -> None:
    if task.cancelled():
        done.set_exception(SandboxError("the call was cancelled", code="CANCELLED"))
        return
    error = task.exception()
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(task.result())
