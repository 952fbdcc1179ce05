"""A command's event stream, the same whether it comes from Exec (a new command) or StreamLogs (a known process)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from ._transport import SandboxRpc
from .errors import SandboxError
from .output import OutputChunk, StreamName


@dataclass(frozen=True, slots=True)
class ProcessEvent:
    """The process record: Exec's ``started``, StreamLogs' first event."""

    info: pb.ProcessInfo


@dataclass(frozen=True, slots=True)
class OutputEvent:
    """Some output."""

    chunk: OutputChunk


@dataclass(frozen=True, slots=True)
class GapEvent:
    """Output asked for that the daemon no longer retains."""

    stream: StreamName
    offset: int
    missed_bytes: int


@dataclass(frozen=True, slots=True)
class ExitedEvent:
    """The last event: the process exited."""

    exited: pb.ProcessExited


@dataclass(frozen=True, slots=True)
class CaughtUpEvent:
    """The last event of a snapshot of a process still running (never asked for by a handle, which follows)."""


#: One event of a command's stream.
CommandEvent = ProcessEvent | OutputEvent | GapEvent | ExitedEvent | CaughtUpEvent


class CommandSource(Protocol):
    """CommandSource opens a command's event stream.

    A resumable source (StreamLogs of a background process) can be opened again from any offsets after a failure;
    an Exec source only once, because the daemon kills an Exec command whose call is gone. Closing the iterator
    (``aclose()``, or cancelling the task reading it) cancels the call.
    """

    #: Whether ``open`` may be called again after a failure.
    resumable: bool

    def open(self, stdout_offset: int, stderr_offset: int) -> AsyncGenerator[CommandEvent, None]:
        """Opens the stream from the given offsets."""
        ...


class ExecSource:
    """The source of a new command run by Exec: ``ProcessEvent`` first, output, ``ExitedEvent`` last."""

    resumable = False

    def __init__(self, rpc: SandboxRpc, request: pb.ExecRequest) -> None:
        self._rpc = rpc
        self._request = request
        self._opened = False

    async def open(self, stdout_offset: int, stderr_offset: int) -> AsyncGenerator[CommandEvent, None]:
        """Runs the command; the offsets are ignored (a new command starts at 0)."""
        if self._opened:
            raise SandboxError("an Exec stream cannot be reopened: the daemon ends its command with the call", code="NOT_RESUMABLE")
        self._opened = True
        call = self._rpc.exec(self._request, metadata=self._rpc.metadata)
        try:
            async for response in call:
                event = command_event(response)
                if event is not None:
                    yield event
        finally:
            # After the exit this does nothing; otherwise it resets the stream and the daemon kills the command.
            call.cancel()


class LogsSource:
    """The source of a process's output through StreamLogs with ``follow``: ``ProcessEvent`` first, then output
    from the offsets (or a gap where output is no longer retained), ``ExitedEvent`` last."""

    resumable = True

    def __init__(self, rpc: SandboxRpc, process_id: str) -> None:
        self._rpc = rpc
        self._process_id = process_id

    async def open(self, stdout_offset: int, stderr_offset: int) -> AsyncGenerator[CommandEvent, None]:
        """Opens StreamLogs from the offsets."""
        request = pb.StreamLogsRequest(
            process_id=self._process_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset, follow=True
        )
        call = self._rpc.stream_logs(request, metadata=self._rpc.metadata)
        try:
            async for response in call:
                event = command_event(response)
                if event is not None:
                    yield event
        finally:
            call.cancel()


def command_event(response: pb.ExecResponse | pb.StreamLogsResponse) -> CommandEvent | None:
    """The event an Exec or StreamLogs response carries (Exec's ``started`` is StreamLogs' ``process``); None for
    one this SDK does not know."""
    kind = response.WhichOneof("event")
    if kind == "started" or kind == "process":
        return ProcessEvent(getattr(response, kind))
    if kind == "output":
        return OutputEvent(chunk_from_proto(response.output))
    if kind == "exited":
        return ExitedEvent(response.exited)
    if kind == "gap" and isinstance(response, pb.StreamLogsResponse):
        return GapEvent(stream_name(response.gap.stream), response.gap.offset, response.gap.missed_bytes)
    if kind == "caught_up":
        return CaughtUpEvent()
    return None


def chunk_from_proto(chunk: pb.OutputChunk) -> OutputChunk:
    """Converts an OutputChunk message."""
    return OutputChunk(stream=stream_name(chunk.stream), data=chunk.data, offset=chunk.offset)


def stream_name(stream: int) -> StreamName:
    """The name of a protobuf output stream."""
    return "stderr" if stream == pb.OUTPUT_STREAM_STDERR else "stdout"
