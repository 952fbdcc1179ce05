"""CommandStream: follows one command's events and keeps it followed (the TypeScript client's command-stream.ts)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc.aio

from ._reconnect import ReconnectPolicy, is_transient
from ._sources import CommandEvent, CommandSource
from .errors import SandboxError, SandboxUnavailableError, from_rpc_error
from .output import StreamName
from .records import CommandResult


@dataclass(frozen=True, slots=True)
class NotFollowing:
    """Created; nothing read yet."""


@dataclass(frozen=True, slots=True)
class Following:
    """The pump task reads the stream."""

    task: asyncio.Task[CommandResult]


@dataclass(frozen=True, slots=True)
class Finished:
    """The command exited; the result is known."""

    result: CommandResult


@dataclass(frozen=True, slots=True)
class Failed:
    """Following ended without the exit: a lasting failure, lost output, or the handle was detached."""

    error: BaseException


#: Where a command's stream is; it is in exactly one of these.
StreamState = NotFollowing | Following | Finished | Failed


class CommandStream:
    """CommandStream reads a command's events from a :class:`CommandSource` and hands each to ``apply`` until one
    is the exit. After a transient failure it opens the source again from ``offsets()`` after the policy's backoff,
    for at most ``max_attempts`` consecutive failures; never for a source that cannot resume (Exec), and never once
    ``kill_requested()``. Its state is one :data:`StreamState`; ``on_settle`` is told of the final one."""

    def __init__(
        self,
        source: CommandSource,
        policy: ReconnectPolicy,
        *,
        apply: Callable[[CommandEvent], Awaitable[CommandResult | None]],
        offsets: Callable[[], dict[StreamName, int]],
        kill_requested: Callable[[], bool],
        process_id: Callable[[], str],
        on_settle: Callable[[Finished | Failed], None],
    ) -> None:
        self.source = source
        self._policy = policy
        self._apply = apply
        self._offsets = offsets
        self._kill_requested = kill_requested
        self._process_id = process_id
        self._on_settle = on_settle
        self._state: StreamState = NotFollowing()
        self._stop_reason: BaseException | None = None
        #: How many times the stream opened a new call after a failure.
        self.reconnects = 0

    @property
    def state(self) -> StreamState:
        """The current state."""
        return self._state

    def follow(self) -> asyncio.Future[CommandResult]:
        """Starts following if nobody did yet; the future settles with the result, or the error following ended with."""
        state = self._state
        if isinstance(state, Following):
            return state.task
        if isinstance(state, NotFollowing):
            task = asyncio.get_running_loop().create_task(self._run())
            # The outcome is raised to whoever waits or iterates; a handle nobody follows must not log it as lost.
            task.add_done_callback(lambda finished: finished.cancelled() or finished.exception())
            self._state = Following(task)
            return task
        done: asyncio.Future[CommandResult] = asyncio.get_running_loop().create_future()
        if isinstance(state, Finished):
            done.set_result(state.result)
        else:
            done.set_exception(state.error)
        return done

    async def stop(self, reason: BaseException) -> None:
        """Stops following with ``reason`` as the outcome seen by waiters and iterators, and waits until the stream's
        call is cancelled (an Exec command is then killed by the daemon)."""
        state = self._state
        if isinstance(state, Following):
            if self._stop_reason is None:
                self._stop_reason = reason
            state.task.cancel()
            await asyncio.wait([state.task])
        elif isinstance(state, NotFollowing):
            self._settle(Failed(reason))

    async def _run(self) -> CommandResult:
        try:
            result = await self._pump()
        except asyncio.CancelledError as cancelled:
            if self._stop_reason is None:
                # Not ours (the loop is shutting down): pass the cancellation on.
                self._settle(Failed(SandboxError("following the command was cancelled", code="CANCELLED")))
                raise
            self._settle(Failed(self._stop_reason))
            raise self._stop_reason from cancelled
        except BaseException as error:
            self._settle(Failed(error))
            raise
        self._settle(Finished(result))
        return result

    def _settle(self, state: Finished | Failed) -> None:
        self._state = state
        self._on_settle(state)

    async def _pump(self) -> CommandResult:
        """Reads the stream to the exit, reconnecting as the class comment says."""
        policy = self._policy
        failures = 0
        while True:
            offsets = self._offsets()
            events = self.source.open(offsets["stdout"], offsets["stderr"])
            try:
                async for event in events:
                    failures = 0
                    result = await self._apply(event)
                    if result is not None:
                        return result
                raise SandboxError("the stream ended without the command's exit", code="NO_EXIT")
            except grpc.aio.AioRpcError as error:
                if not is_transient(error):
                    raise from_rpc_error(error, process_id=self._process_id() or None) from error
                if not self.source.resumable:
                    raise SandboxUnavailableError(
                        f"the connection to the sandbox was lost ({error.details()}); the daemon ends an Exec command whose call is gone"
                    ) from error
                if self._kill_requested():
                    raise from_rpc_error(error, process_id=self._process_id()) from error
                if failures >= policy.max_attempts:
                    raise SandboxUnavailableError(f"gave up after {failures} reconnect attempts: {error.details()}") from error
                failures += 1
            finally:
                await events.aclose()
            await asyncio.sleep(policy.delay(failures))
            self.reconnects += 1
