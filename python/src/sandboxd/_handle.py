"""AsyncCommandHandle: the one core every view of a command is built on (exec results, exec_stream events, background
process handles, and the sync API's wrappers)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import re
import signal as signals
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self

import grpc
import grpc.aio

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from ._chunk_queue import ChunkQueue
from ._command_output import CommandOutput
from ._command_stream import CommandStream, Failed, Finished, Following
from . import _readiness as readiness
from ._input import InputStream
from ._readiness import LogMatch, PortMode, PortReady
from ._reconnect import ReconnectPolicy
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
from .errors import ExecutionTimeoutError, ProcessNotFoundError, SandboxError, from_rpc_error
from .output import InputAck, OutputChunk, Output, RetainedOutput, StreamName, join_chunks
from .records import CommandResult, ExitCause, OutputGap, ProcessExit, ProcessInfo, ProcessLogs, ProcessStatus

#: Default ``max_retained_bytes`` of a background process's handle: 16 MiB.
DEFAULT_MAX_RETAINED_BYTES = 16 * 1024 * 1024

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


class AsyncCommandHandle:
    """AsyncCommandHandle is a live handle to one command in the sandbox (the LangSmith sandbox SDK's CommandHandle, for asyncio). It
    assembles small parts, as the TypeScript client's ProcessHandle does: the record (what the daemon said of the
    process), a :class:`CommandStream` that follows it and reconnects, the :class:`CommandOutput` it feeds (offsets,
    the output kept for the result, iterators with backpressure) and an input stream.

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

    #: The LangSmith sandbox SDK's name for the default :attr:`ReconnectPolicy.max_attempts`.
    MAX_AUTO_RECONNECTS = ReconnectPolicy().max_attempts
    #: The LangSmith sandbox SDK's name for the default :attr:`ReconnectPolicy.backoff_base`, in seconds.
    BACKOFF_BASE = ReconnectPolicy().backoff_base
    #: The LangSmith sandbox SDK's name for the default :attr:`ReconnectPolicy.backoff_max`, in seconds.
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
        self._info = info
        self._exit: ProcessExit | None = info.exit if info is not None and info.status not in _LIVE else None
        self._output = CommandOutput(retained, offsets)
        # The first iterator's queue, when it was subscribed before the stream started (see ``_run_exec``).
        self._first_iterator: ChunkQueue | None = None
        self._encoding = encoding or context.encoding
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._kill_requested = False
        self._input: InputStream | None = None
        self._input_closed = False
        self._stream = CommandStream(
            source,
            context.reconnect,
            apply=self._apply,
            offsets=lambda: self._output.offsets,
            kill_requested=lambda: self._kill_requested,
            process_id=lambda: self.process_id,
            on_settle=self._settled,
        )
        if info is not None:
            self._started.set_result(None)

    # Construction (used by the sandbox).

    @classmethod
    async def _run_exec(
        cls,
        context: HandleContext,
        request: pb.ExecRequest,
        encoding: str | None,
        max_retained_bytes: float = math.inf,
        *,
        iterated: bool = False,
    ) -> AsyncCommandHandle:
        """Runs a command through Exec and returns its handle once the daemon reports it started; raises the daemon's
        refusal. Cancelling the handle later (``_stop``) cancels the call, which kills the command. The result keeps
        at most ``max_retained_bytes`` of output (everything by default). With ``iterated`` the handle's first
        iterator is subscribed before the call starts, so it gets every byte whatever the result keeps (and holds the
        stream back until it is iterated)."""
        retained = RetainedOutput(max_retained_bytes)
        handle = cls(context, ExecSource(context.rpc, request), info=None, retained=retained, encoding=encoding)
        if iterated:
            handle._first_iterator = handle._output.subscribe()
        handle._stream.follow()
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
        """The process id, named as the LangSmith sandbox SDK names it."""
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
    def cause(self) -> ExitCause | None:
        """Why the process ended, once known (see :class:`ExitCause`), else None."""
        return self._exit.cause if self._exit else None

    @property
    def last_stdout_offset(self) -> int:
        """Offset after the last stdout byte handed to you: yielded by an iterator of this handle (or skipped by an
        OutputLostError it raised), or, while none yielded anything, received for the result. Where ``reconnect()``
        resumes; it does not move once your loop has left."""
        return self._output.resume_offsets()["stdout"]

    @property
    def last_stderr_offset(self) -> int:
        """Offset after the last stderr byte handed to you, as ``last_stdout_offset`` says for stdout."""
        return self._output.resume_offsets()["stderr"]

    @property
    def auto_reconnects(self) -> int:
        """How many times this handle reconnected on its own."""
        return self._stream.reconnects

    # Following the command.

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        """Yields output chunks, stdout and stderr interleaved in arrival order (see the class comment)."""
        first, self._first_iterator = self._first_iterator, None
        return self._output.iterate(self._ended, self._stream.follow, first)

    async def wait(self, timeout: float | None = None) -> CommandResult:
        """Waits for the command to exit and returns its result; raises a SandboxError when following failed for
        good. ``timeout`` (seconds) bounds the wait only: ExecutionTimeoutError, and the command runs on. Cancelling
        the wait does not stop following either."""
        state = self._stream.state
        if isinstance(state, Finished):
            return state.result
        if isinstance(state, Failed):
            raise state.error
        task = self._stream.follow()
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
        offsets = self._output.resume_offsets()
        retained = self._output.retained
        return AsyncCommandHandle(
            self._context,
            LogsSource(self._context.rpc, self._info.process_id),
            info=self._info,
            offsets=offsets,
            retained=RetainedOutput(retained.limit_bytes, retained, up_to=offsets),
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

    # Readiness: the Cloudflare Sandbox SDK's waitForPort, waitForLog and waitForExit, snake_case, in seconds.

    async def wait_for_port(
        self,
        port: int,
        *,
        timeout: float | None = None,
        mode: PortMode = "http",
        path: str = "/",
        status: int | tuple[int, int] = (200, 399),
        host: str | None = None,
        interval: float | None = None,
    ) -> PortReady:
        """Waits until ``port`` answers inside the sandbox, checked by the daemon from there: by default an HTTP GET
        of ``path`` answered with a ``status`` (one, or a ``(low, high)`` range; 200-399), ``mode="tcp"`` a
        connection, on 127.0.0.1 or ::1 (or ``host``), every ``interval`` seconds (0.1).

        Raises :class:`~sandboxd.ProcessExitedBeforeReadyError` (its ``exit``, ``last_stderr``...) as soon as this
        process exits first, :class:`~sandboxd.ProcessReadyTimeoutError` after ``timeout`` seconds (none by
        default). Cancelling the call stops the daemon's probing."""
        await self._started
        return await readiness.wait_for_port(
            self._context.rpc,
            port,
            process_id=self.process_id,
            timeout=timeout,
            mode=mode,
            path=path,
            status=status,
            host=host,
            interval=interval,
        )

    async def wait_for_log(
        self,
        pattern: str | re.Pattern[str],
        *,
        timeout: float | None = None,
        stream: StreamName | Literal["both"] = "both",
        stdout_offset: int = 0,
        stderr_offset: int = 0,
    ) -> LogMatch:
        """Waits until a line of this process's output matches ``pattern`` (a regular expression, matched line by
        line in linear time: no backreferences, lookaround or flags) and returns it with its groups and byte offset.
        A line printed before the call counts: the daemon searches what it retains first (from the offsets).

        Raises :class:`~sandboxd.ProcessExitedBeforeReadyError` once the output ends without a match,
        :class:`~sandboxd.ProcessReadyTimeoutError` after ``timeout`` seconds."""
        await self._started
        return await readiness.wait_for_log(
            self._context.rpc,
            self.process_id,
            pattern,
            timeout=timeout,
            stream=stream,
            stdout_offset=stdout_offset,
            stderr_offset=stderr_offset,
        )

    async def wait_for_exit(self, *, timeout: float | None = None) -> ProcessExit:
        """Waits until this process exits and returns how it ended, in one call (without following the output).
        Raises :class:`~sandboxd.ProcessReadyTimeoutError` after ``timeout`` seconds; the process runs on."""
        await self._started
        exit, info = await readiness.wait_for_exit(self._context.rpc, self.process_id, timeout=timeout)
        if info is not None:
            self._adopt(info)
        self._exit = self._exit or exit
        return exit

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

    async def _stop(self, reason: BaseException) -> None:
        """Stops following with ``reason`` (see :meth:`CommandStream.stop`) and closes the input call."""
        if self._input is not None:
            self._input.close()
        self._input_closed = True
        await self._stream.stop(reason)

    def _settled(self, state: Finished | Failed) -> None:
        error = state.error if isinstance(state, Failed) else None
        if not self._started.done():
            if error is not None:
                self._started.set_exception(error)
                self._started.exception()  # Retrieved: a failure before the start is raised where it is awaited.
            else:
                self._started.set_result(None)
        self._output.finish(error)

    def _ended(self) -> tuple[bool, BaseException | None]:
        state = self._stream.state
        if isinstance(state, Finished):
            return True, None
        if isinstance(state, Failed):
            return True, state.error
        return False, None

    async def _apply(self, event: CommandEvent) -> CommandResult | None:
        match event:
            case ProcessEvent(info):
                self._adopt(ProcessInfo.from_proto(info))
            case OutputEvent(chunk):
                await self._output.deliver(chunk)
            case GapEvent(stream, offset, missed_bytes):
                self._output.gap(stream, offset, missed_bytes)
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

    def _adopt(self, info: ProcessInfo) -> None:
        self._info = info
        if info.exit is not None and self._exit is None and info.status not in _LIVE:
            self._exit = info.exit
        if not self._started.done():
            self._started.set_result(None)

    def _result(self, ended: ProcessExit) -> CommandResult:
        retained = self._output.retained
        joined = join_chunks(retained.retained(), self._encoding)
        return CommandResult(
            process_id=self.process_id,
            command=self._info.command_line if self._info else "",
            session_id=self.session_id,
            exit=ended,
            stdout=joined.stdout,
            stderr=joined.stderr,
            output=joined.output,
            dropped_bytes=dict(retained.dropped_bytes),
            dropped=tuple(OutputGap(stream, offset, missed) for stream, offset, missed in retained.dropped_ranges),
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
        if isinstance(self._stream.state, Following):
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
        stdout_head=Output(response.head.stdout, encoding),
        stderr_head=Output(response.head.stderr, encoding),
        dropped=tuple(OutputGap.from_proto(gap) for gap in response.head.dropped),
    )
