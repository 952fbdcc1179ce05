"""AsyncCommandHandle: the one core every view of a command is built on (exec results, exec_stream events, background
process handles, and the sync API's wrappers)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import signal as signals
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import grpc
import grpc.aio

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from ._input import InputStream
from ._reconnect import ReconnectPolicy, is_transient
from ._sources import (
    CaughtUpEvent,
    CommandEvent,
    CommandSource,
    ExecSource,
    ExitedEvent,
    GapEvent,
    LogsSource,
    OutputEvent,
    ProcessEvent,
)
from ._transport import SandboxRpc
from .errors import (
    ExecutionTimeoutError,
    OutputLostError,
    ProcessNotFoundError,
    SandboxError,
    SandboxUnavailableError,
    from_rpc_error,
)
from .output import InputAck, OutputChunk, Output, RetainedOutput, StreamName, join_chunks
from .records import CommandResult, ProcessExit, ProcessInfo, ProcessLogs, ProcessStatus

#: Default ``max_retained_bytes`` of a background process's handle: 16 MiB.
DEFAULT_MAX_RETAINED_BYTES = 16 * 1024 * 1024

#: Queue capacity of one iterator, in bytes: beyond it the stream is held back (backpressure).
_ITERATOR_CAPACITY_BYTES = 4 * 1024 * 1024

#: How long leaving ``async with handle`` waits for the killed process to exit, in seconds.
_EXIT_WAIT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class HandleContext:
    """What a handle needs from the sandbox that made it."""

    #: The daemon's RPCs.
    rpc: SandboxRpc
    #: How a background process's handle reconnects.
    reconnect: ReconnectPolicy
    #: Encoding of the text helpers.
    encoding: str


@dataclass(frozen=True, slots=True)
class _NotFollowing:
    """Created; nothing read yet."""


@dataclass(frozen=True, slots=True)
class _Following:
    """The pump task reads the stream."""

    task: asyncio.Task[CommandResult]


@dataclass(frozen=True, slots=True)
class _Finished:
    """The command exited; the result is known."""

    result: CommandResult


@dataclass(frozen=True, slots=True)
class _Failed:
    """Following ended without the exit: a lasting failure, lost output, or the handle was detached."""

    error: BaseException


_State = _NotFollowing | _Following | _Finished | _Failed


class AsyncCommandHandle:
    """AsyncCommandHandle is a live handle to one command in the sandbox (seed 001's CommandHandle, for asyncio).

    - ``async for chunk in handle`` yields :class:`~sandboxd.OutputChunk` s of stdout and stderr interleaved in
      arrival order, each with its byte offset. Several iterators may run; one that starts late first gets the
      chunks the handle already kept. Leaving a loop early detaches that iterator only; the command runs on.
    - ``await handle.wait()`` returns the :class:`~sandboxd.CommandResult` once the command exits.
    - ``kill(signal)`` signals the process group; ``send_input``/``close_input``/``resize`` go over one SendInput
      call; ``async with handle:`` kills the command on leaving the block if it is still running.

    A background process's handle follows it through StreamLogs and reconnects on its own after a transient failure
    (UNAVAILABLE, a reset connection, a dead path found by keepalive), resuming from ``last_stdout_offset`` and
    ``last_stderr_offset`` after a jittered exponential backoff (the sandbox's :class:`~sandboxd.ReconnectPolicy`),
    never after ``kill()``. Bytes below the handle's offsets are skipped, so none is duplicated; bytes the daemon no
    longer retains end the stream with :class:`~sandboxd.OutputLostError` rather than silently. A lasting failure
    ends it with a SandboxError, never a hang.
    """

    #: Seed 001's name for the default :attr:`ReconnectPolicy.max_attempts`.
    MAX_AUTO_RECONNECTS = ReconnectPolicy().max_attempts
    #: Seed 001's name for the default :attr:`ReconnectPolicy.backoff_base`, in seconds.
    BACKOFF_BASE = ReconnectPolicy().backoff_base
    #: Seed 001's name for the default :attr:`ReconnectPolicy.backoff_max`, in seconds.
    BACKOFF_MAX = ReconnectPolicy().backoff_max

    def __init__(
        self,
        context: HandleContext,
        source: CommandSource,
        *,
        info: ProcessInfo | None,
        offsets: dict[StreamName, int] | None = None,
        retained: RetainedOutput,
        encoding: str | None = None,
    ) -> None:
        """Internal: handles are made by the sandbox (``start_process``, ``processes.get``...)."""
        self._context = context
        self._source = source
        self._info = info
        self._exit: ProcessExit | None = info.exit if info is not None and info.status not in _LIVE else None
        self._offsets: dict[StreamName, int] = dict(offsets or {"stdout": 0, "stderr": 0})
        # Where the user is: offsets after the last chunk an iterator handed over (None until one did). The pump
        # goes on receiving for the result while nobody iterates, so it can be ahead of what the user saw.
        self._seen: dict[StreamName, int] | None = None
        self._from: dict[StreamName, int] = dict(self._offsets)
        self._output = retained
        self._encoding = encoding or context.encoding
        self._state: _State = _NotFollowing()
        self._subscribers: set[_ChunkQueue] = set()
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop_reason: BaseException | None = None
        self._kill_requested = False
        self._input: InputStream | None = None
        self._input_closed = False
        self._reconnects = 0
        if info is not None:
            self._started.set_result(None)

    # Construction (used by the sandbox).

    @classmethod
    async def _run_exec(cls, context: HandleContext, request: pb.ExecRequest, encoding: str | None) -> AsyncCommandHandle:
        """Runs a command through Exec and returns its handle once the daemon reports it started; raises the daemon's
        refusal. Cancelling the handle later (``_stop``) cancels the call, which kills the command."""
        handle = cls(context, ExecSource(context.rpc, request), info=None, retained=RetainedOutput(math.inf), encoding=encoding)
        handle._follow()
        try:
            await handle._started
        except BaseException:
            await handle._stop(SandboxError("the command was cancelled", code="CANCELLED"))
            raise
        return handle

    @classmethod
    def _for_process(
        cls,
        context: HandleContext,
        info: ProcessInfo,
        *,
        offsets: dict[StreamName, int] | None = None,
        retained: RetainedOutput | None = None,
        max_retained_bytes: float | None = None,
        encoding: str | None = None,
    ) -> AsyncCommandHandle:
        """A handle of a known process whose stream starts at ``offsets`` (0, 0 by default) when first consumed."""
        limit = max_retained_bytes if max_retained_bytes is not None else (retained.limit_bytes if retained else DEFAULT_MAX_RETAINED_BYTES)
        return cls(
            context,
            LogsSource(context.rpc, info.process_id),
            info=info,
            offsets=offsets,
            retained=RetainedOutput(limit, retained),
            encoding=encoding,
        )

    # What is known about the command.

    @property
    def process_id(self) -> str:
        """The process id (client-chosen or a UUID)."""
        return self._info.process_id if self._info else ""

    @property
    def command_id(self) -> str:
        """The process id, named as seed 001 names it."""
        return self.process_id

    @property
    def pid(self) -> int | None:
        """Operating-system pid on the sandbox, also its process group id; None if never spawned."""
        return self._info.pid if self._info else None

    @property
    def command(self) -> str:
        """The command as given (without its arguments)."""
        return self._info.command if self._info else ""

    @property
    def args(self) -> tuple[str, ...]:
        """The arguments as given, for argv form."""
        return self._info.args if self._info else ()

    @property
    def session_id(self) -> str | None:
        """Session the process belongs to, if any."""
        return self._info.session_id if self._info else None

    @property
    def info(self) -> ProcessInfo | None:
        """The process record as last seen by this handle."""
        return self._info

    @property
    def status(self) -> ProcessStatus:
        """Status as last seen by this handle (its stream, ``kill()`` or ``refresh()``)."""
        if self._exit is not None:
            return self._exit.status
        return self._info.status if self._info else ProcessStatus.STARTING

    @property
    def exit(self) -> ProcessExit | None:
        """How the process ended, once known."""
        return self._exit

    @property
    def exit_code(self) -> int | None:
        """The exit code once known (128 + the signal number for a signal), else None."""
        return self._exit.exit_code if self._exit else None

    @property
    def last_stdout_offset(self) -> int:
        """Offset after the last stdout byte handed to you: yielded by an iterator of this handle (or skipped by an
        OutputLostError it raised), or, while none yielded anything, received for the result. Where ``reconnect()``
        resumes; it does not move once your loop has left."""
        return self._resume_offsets()["stdout"]

    @property
    def last_stderr_offset(self) -> int:
        """Offset after the last stderr byte handed to you, as ``last_stdout_offset`` says for stdout."""
        return self._resume_offsets()["stderr"]

    @property
    def auto_reconnects(self) -> int:
        """How many times this handle reconnected on its own."""
        return self._reconnects

    # Following the command.

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        """Yields output chunks, stdout and stderr interleaved in arrival order (see the class comment)."""
        return self._iterate()

    async def wait(self, timeout: float | None = None) -> CommandResult:
        """Waits for the command to exit and returns its result; raises a SandboxError when following failed for
        good. ``timeout`` (seconds) bounds the wait only: ExecutionTimeoutError, and the command runs on. Cancelling
        the wait does not stop following either."""
        state = self._state
        if isinstance(state, _Finished):
            return state.result
        if isinstance(state, _Failed):
            raise state.error
        task = self._follow()
        try:
            async with asyncio.timeout(timeout) as deadline:
                return await asyncio.shield(task)
        except TimeoutError:
            if deadline.expired():
                raise ExecutionTimeoutError(timeout, f"the wait timed out after {timeout:g} s; the command runs on") from None
            raise

    async def kill(self, signal: str | int = "SIGTERM", *, grace_period: float | None = None) -> None:
        """Sends ``signal`` (a name such as ``"SIGINT"``, or a number) to the command's whole process group.

        The daemon escalates to SIGKILL after ``grace_period`` seconds (its default, 5 s, when None; never when
        ``math.inf``). The handle does not reconnect after this; its stream ends with the exit.
        """
        self._kill_requested = True
        await self._started
        request = pb.KillProcessRequest(process_id=self.process_id, signal=signal_name(signal), grace_period_ms=grace_ms(grace_period))
        try:
            response = await self._context.rpc.kill_process(request, metadata=self._context.rpc.metadata)
        except grpc.aio.AioRpcError as error:
            raise from_rpc_error(error, process_id=self.process_id) from error
        if response.HasField("process"):
            self._adopt(ProcessInfo.from_proto(response.process))

    async def send_input(self, data: str | bytes) -> InputAck:
        """Writes ``data`` (text as UTF-8, or bytes) to the command's stdin (or its PTY) and returns the
        acknowledgement. The command must have been started with ``stdin=True`` or ``pty``."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        return await self._send(pb.SendInputRequest(data=payload))

    async def close_input(self) -> InputAck:
        """Closes the command's stdin (EOF; ^D to a PTY)."""
        return await self._send(pb.SendInputRequest(close=pb.CloseInput()))

    async def resize(self, cols: int, rows: int) -> InputAck:
        """Resizes the command's PTY to ``cols`` columns and ``rows`` rows."""
        return await self._send(pb.SendInputRequest(resize=pb.PtyOptions(cols=cols, rows=rows)))

    async def reconnect(self) -> AsyncCommandHandle:
        """Returns a new handle that resumes this command's stream exactly at ``last_stdout_offset`` and
        ``last_stderr_offset``: iterating it yields only bytes from there on (what this handle received past them but
        never yielded comes again), while its result also holds the output this handle kept below them. This handle
        stops following: its iterators end with a SandboxError of code ``DETACHED``."""
        await self._started
        assert self._info is not None
        await self._stop(_detached())
        offsets = self._resume_offsets()
        return AsyncCommandHandle(
            self._context,
            LogsSource(self._context.rpc, self._info.process_id),
            info=self._info,
            offsets=offsets,
            retained=RetainedOutput(self._output.limit_bytes, self._output, up_to=offsets),
            encoding=self._encoding,
        )

    async def detach(self) -> None:
        """Stops following the command and closes its input call; the command keeps running. Input sent through this
        handle afterwards is refused with a SandboxError ``DETACHED``."""
        await self._stop(_detached())

    async def refresh(self) -> ProcessStatus:
        """Refreshes the record from the daemon and returns the status; keeps the last one once the record is gone."""
        await self._started
        try:
            response = await self._context.rpc.get_process(pb.GetProcessRequest(process_id=self.process_id), metadata=self._context.rpc.metadata)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND and self._exit is not None:
                return self.status
            raise from_rpc_error(error, process_id=self.process_id) from error
        if response.HasField("process"):
            self._adopt(ProcessInfo.from_proto(response.process))
        return self.status

    async def logs(self) -> ProcessLogs:
        """The output the daemon still retains for this process (a snapshot, GetProcessLogs)."""
        await self._started
        return await fetch_logs(self._context, self.process_id, self._encoding)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        """Leaving ``async with handle`` kills the command if it has not exited (SIGTERM, SIGKILL 1 s later), waits
        for the exit, and detaches. A failure to kill is raised unless the block is already raising."""
        try:
            await self._kill_and_wait()
        except (SandboxError, asyncio.CancelledError, TimeoutError):
            if exc is None:
                raise
        finally:
            await self._stop(_detached())

    # Internals.

    def _follow(self) -> asyncio.Future[CommandResult]:
        state = self._state
        if isinstance(state, _Following):
            return state.task
        if isinstance(state, _NotFollowing):
            task = asyncio.get_running_loop().create_task(self._run())
            # The outcome is raised to whoever waits or iterates; a handle nobody follows must not log it as lost.
            task.add_done_callback(lambda finished: finished.cancelled() or finished.exception())
            self._state = _Following(task)
            return task
        done: asyncio.Future[CommandResult] = asyncio.get_running_loop().create_future()
        if isinstance(state, _Finished):
            done.set_result(state.result)
        else:
            done.set_exception(state.error)
        return done

    async def _stop(self, reason: BaseException) -> None:
        """Stops following with ``reason`` as the outcome seen by waiters and iterators, and waits until the stream's
        call is cancelled (an Exec command is then killed by the daemon)."""
        if self._input is not None:
            self._input.close()
        self._input_closed = True
        state = self._state
        if isinstance(state, _Following):
            if self._stop_reason is None:
                self._stop_reason = reason
            state.task.cancel()
            await asyncio.wait([state.task])
        elif isinstance(state, _NotFollowing):
            self._settle(_Failed(reason))

    async def _run(self) -> CommandResult:
        try:
            result = await self._pump()
        except asyncio.CancelledError as cancelled:
            if self._stop_reason is None:
                # Not ours (the loop is shutting down): pass the cancellation on.
                self._settle(_Failed(SandboxError("following the command was cancelled", code="CANCELLED")))
                raise
            self._settle(_Failed(self._stop_reason))
            raise self._stop_reason from cancelled
        except BaseException as error:
            self._settle(_Failed(error))
            raise
        self._settle(_Finished(result))
        return result

    def _settle(self, state: _Finished | _Failed) -> None:
        self._state = state
        error = state.error if isinstance(state, _Failed) else None
        if not self._started.done():
            if error is not None:
                self._started.set_exception(error)
                self._started.exception()  # Retrieved: a failure before the start is raised where it is awaited.
            else:
                self._started.set_result(None)
        for queue in self._subscribers:
            queue.finish(error)

    async def _pump(self) -> CommandResult:
        """Reads the stream to the exit, reconnecting as the class comment says."""
        policy = self._context.reconnect
        failures = 0
        while True:
            events = self._source.open(self._offsets["stdout"], self._offsets["stderr"])
            try:
                async for event in events:
                    failures = 0
                    result = await self._apply(event)
                    if result is not None:
                        return result
                raise SandboxError("the stream ended without the command's exit", code="NO_EXIT")
            except grpc.aio.AioRpcError as error:
                if not is_transient(error):
                    raise from_rpc_error(error, process_id=self.process_id or None) from error
                if not self._source.resumable:
                    raise SandboxUnavailableError(
                        f"the connection to the sandbox was lost ({error.details()}); the daemon ends an Exec command whose call is gone"
                    ) from error
                if self._kill_requested:
                    raise from_rpc_error(error, process_id=self.process_id) from error
                if failures >= policy.max_attempts:
                    raise SandboxUnavailableError(f"gave up after {failures} reconnect attempts: {error.details()}") from error
                failures += 1
            finally:
                await events.aclose()
            await asyncio.sleep(policy.delay(failures))
            self._reconnects += 1

    async def _apply(self, event: CommandEvent) -> CommandResult | None:
        match event:
            case ProcessEvent(info):
                self._adopt(ProcessInfo.from_proto(info))
            case OutputEvent(chunk):
                await self._deliver(chunk)
            case GapEvent(stream, offset, missed_bytes):
                # Only bytes from our own offset on count as lost; the offset moves past them for reconnect().
                end = offset + missed_bytes
                start = max(offset, self._offsets[stream])
                if end > start:
                    self._offsets[stream] = end
                    raise OutputLostError(stream, start, end - start)
            case ExitedEvent(exited):
                ended = ProcessExit.from_proto(exited)
                if ended is None:
                    raise SandboxError("the command ended without an exit code or a signal", code="NO_EXIT")
                self._exit = ended
                if self._info is not None:
                    self._info = dataclasses.replace(self._info, status=ended.status, exit=ended)
                return self._result(ended)
            case CaughtUpEvent():
                raise SandboxError("the log stream stopped before the command exited", code="NO_EXIT")
        return None

    async def _deliver(self, received: OutputChunk) -> None:
        """Hands a chunk to the result and every iterator, skipping bytes already received."""
        expected = self._offsets[received.stream]
        if received.end <= expected:
            return
        if received.offset > expected:
            self._offsets[received.stream] = received.offset
            raise OutputLostError(received.stream, expected, received.offset - expected)
        chunk = received if received.offset == expected else OutputChunk(received.stream, received.data[expected - received.offset :], expected)
        self._offsets[chunk.stream] = chunk.end
        self._output.push(chunk)
        for queue in list(self._subscribers):
            await queue.put(chunk)

    async def _iterate(self) -> AsyncGenerator[OutputChunk, None]:
        # Subscribing and copying what was received happen in one step, so no chunk is missed or doubled.
        replay = self._output.received()
        state = self._state
        if isinstance(state, (_Finished, _Failed)):
            for chunk in replay:
                yield chunk
            if isinstance(state, _Failed):
                raise state.error
            return
        queue = _ChunkQueue(_ITERATOR_CAPACITY_BYTES)
        self._subscribers.add(queue)
        try:
            self._follow()
            for chunk in replay:
                self._saw(chunk.stream, chunk.end)
                yield chunk
            while True:
                try:
                    chunk_or_end = await queue.get()
                except OutputLostError as lost:
                    # The user was told of the hole: where they are is past it.
                    self._saw(lost.stream, lost.offset + lost.missed_bytes)
                    raise
                if chunk_or_end is None:
                    return
                self._saw(chunk_or_end.stream, chunk_or_end.end)
                yield chunk_or_end
        finally:
            self._subscribers.discard(queue)
            queue.close()

    def _saw(self, stream: StreamName, end: int) -> None:
        if self._seen is None:
            self._seen = dict(self._from)
        self._seen[stream] = max(self._seen[stream], end)

    def _resume_offsets(self) -> dict[StreamName, int]:
        return dict(self._seen if self._seen is not None else self._offsets)

    def _adopt(self, info: ProcessInfo) -> None:
        self._info = info
        if info.exit is not None and self._exit is None and info.status not in _LIVE:
            self._exit = info.exit
        if not self._started.done():
            self._started.set_result(None)

    def _result(self, ended: ProcessExit) -> CommandResult:
        joined = join_chunks(self._output.retained(), self._encoding)
        return CommandResult(
            process_id=self.process_id,
            command=self._info.command_line if self._info else "",
            session_id=self.session_id,
            exit=ended,
            stdout=joined.stdout,
            stderr=joined.stderr,
            output=joined.output,
            dropped_bytes=dict(self._output.dropped_bytes),
        )

    async def _send(self, request: pb.SendInputRequest) -> InputAck:
        await self._started
        if self._input_closed:
            raise _detached()
        if self._input is None:
            self._input = InputStream(self._context.rpc, self.process_id)
        return await self._input.send(request)

    async def _kill_and_wait(self) -> None:
        if self._exit is not None or not self._started.done() or self._started.exception() is not None:
            return
        try:
            await self.kill("SIGTERM", grace_period=1.0)
        except ProcessNotFoundError:
            return
        if isinstance(self._state, _Following):
            with contextlib.suppress(SandboxError):
                await self.wait(timeout=_EXIT_WAIT_SECONDS)
            return
        async with asyncio.timeout(_EXIT_WAIT_SECONDS):
            while self.status in _LIVE:
                try:
                    await self.refresh()
                except ProcessNotFoundError:
                    return
                await asyncio.sleep(0.02)


_LIVE = (ProcessStatus.STARTING, ProcessStatus.RUNNING)


def _detached() -> SandboxError:
    return SandboxError("the handle was detached from its command", code="DETACHED")


def signal_name(signal: str | int) -> str:
    """The name the daemon takes for a signal: ``"SIGTERM"``, or the name of a number such as 9 or signal.SIGKILL."""
    if isinstance(signal, int):
        return signals.Signals(signal).name
    return signal


def grace_ms(grace_period: float | None) -> int:
    """A grace period in seconds as KillProcess's milliseconds: 0 (the daemon's default) for None, -1 (never) for
    infinity, at least 1 otherwise."""
    if grace_period is None:
        return 0
    if math.isinf(grace_period) or grace_period < 0:
        return -1
    return max(1, min(2**31 - 1, round(grace_period * 1000)))


async def fetch_logs(context: HandleContext, process_id: str, encoding: str) -> ProcessLogs:
    """GetProcessLogs of one process as ProcessLogs; ProcessNotFoundError when unknown."""
    try:
        response = await context.rpc.get_process_logs(pb.GetProcessLogsRequest(process_id=process_id), metadata=context.rpc.metadata)
    except grpc.aio.AioRpcError as error:
        raise from_rpc_error(error, process_id=process_id) from error
    return ProcessLogs(
        process_id=response.process_id,
        stdout=Output(response.stdout, encoding),
        stderr=Output(response.stderr, encoding),
        stdout_offset=response.stdout_offset,
        stderr_offset=response.stderr_offset,
        process=ProcessInfo.from_proto(response.process) if response.HasField("process") else None,
    )


class _ChunkQueue:
    """The chunks waiting for one iterator, bounded in bytes: the pump waits for room (backpressure)."""

    def __init__(self, capacity_bytes: int) -> None:
        self._capacity = capacity_bytes
        self._items: deque[OutputChunk] = deque()
        self._size = 0
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._finished = False
        self._error: BaseException | None = None
        self._closed = False

    async def put(self, chunk: OutputChunk) -> None:
        """Adds a chunk, waiting while the queue is full; does nothing once the iterator has left."""
        while self._size >= self._capacity and not self._closed:
            self._room.clear()
            await self._room.wait()
        if self._closed:
            return
        self._items.append(chunk)
        self._size += len(chunk.data)
        self._ready.set()

    def finish(self, error: BaseException | None) -> None:
        """Ends the queue after what it holds: cleanly, or with ``error``."""
        self._finished = True
        self._error = error
        self._ready.set()

    def close(self) -> None:
        """The iterator left: drop what is queued and release a waiting ``put``."""
        self._closed = True
        self._items.clear()
        self._room.set()

    async def get(self) -> OutputChunk | None:
        """The next chunk, None at a clean end; raises the error of a failed end."""
        while not self._items:
            if self._finished:
                if self._error is not None:
                    raise self._error
                return None
            self._ready.clear()
            await self._ready.wait()
        chunk = self._items.popleft()
        self._size -= len(chunk.data)
        self._room.set()
        return chunk
