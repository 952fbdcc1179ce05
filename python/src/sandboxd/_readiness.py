"""Readiness: waiting until a port answers, a log line matches or a process exits, checked by the daemon from inside the
sandbox, and the TCP ports listening there. The handles and the sandboxes call these; they hold no state."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

import grpc
import grpc.aio

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from ._transport import SandboxRpc
from .errors import InvalidArgumentError, from_rpc_error
from .output import StreamName
from .records import ProcessExit, ProcessInfo

#: What ``wait_for_port`` checks: ``"http"`` GETs a path and checks the status, ``"tcp"`` only connects.
PortMode = Literal["http", "tcp"]


@dataclass(frozen=True, slots=True)
class PortReady:
    """What answered a ``wait_for_port``."""

    #: The address that answered (``"127.0.0.1:3000"``).
    address: str
    #: The HTTP status of the answer; 0 for a TCP check.
    http_status: int
    #: How many tries it took.
    attempts: int
    #: How long the wait took, in seconds.
    waited: float


@dataclass(frozen=True, slots=True)
class LogMatch:
    """The line a ``wait_for_log`` found, and where."""

    #: The whole line that matched, without its line ending.
    line: str
    #: The text that matched.
    match: str
    #: The capture groups in order, None where one took no part (as ``re.Match.groups()``).
    groups: tuple[str | None, ...]
    #: The named groups that took part in the match.
    named_groups: dict[str, str] = field(default_factory=dict)
    #: The stream the line came from.
    stream: StreamName = "stdout"
    #: Byte offset of the match's first byte within its stream.
    offset: int = 0
    #: Byte offset of the line's first byte within its stream.
    line_offset: int = 0


@dataclass(frozen=True, slots=True)
class ListeningPort:
    """A TCP port listening inside the sandbox."""

    #: The port.
    port: int
    #: The address it is bound to (``"0.0.0.0"``, ``"::"``, ``"127.0.0.1"``).
    address: str
    #: Whether it is an IPv6 socket.
    ipv6: bool
    #: The pid of a process holding it; None when the daemon may not see which.
    pid: int | None
    #: That process's program name (at most 15 characters); empty when unknown.
    program: str
    #: The id of the sandbox process whose tree holds it (the command or one it started); None when none.
    process_id: str | None


def _milliseconds(timeout: float | None, name: str = "timeout") -> int:
    """A timeout in seconds as the daemon's milliseconds (rounded up); None or 0 is none."""
    if timeout is None:
        return 0
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout < 0 or math.isnan(timeout):
        raise InvalidArgumentError(f"{name} is a number of seconds, 0 or more, not {timeout!r}", metadata={"field": name})
    return math.ceil(timeout * 1000)


def pattern_source(pattern: str | re.Pattern[str]) -> str:
    """The regular expression the daemon runs for ``pattern``: a ``str`` is one (JavaScript syntax, which shares
    Python's for the common constructs; ``re.escape`` a literal text), a compiled ``re.Pattern`` its source. The daemon
    runs patterns in linear time without flags: a Pattern compiled with IGNORECASE, MULTILINE, DOTALL or VERBOSE is
    an InvalidArgumentError here, before any call."""
    if isinstance(pattern, str):
        return pattern
    refused = pattern.flags & (re.IGNORECASE | re.VERBOSE | re.DOTALL | re.LOCALE)
    if refused:
        raise InvalidArgumentError(
            "wait_for_log runs patterns without flags (in linear time): spell the cases out ('[Rr]eady') instead of IGNORECASE",
            metadata={"field": "pattern"},
        )
    return pattern.pattern


async def wait_for_port(
    rpc: SandboxRpc,
    port: int,
    *,
    process_id: str | None = None,
    timeout: float | None = None,
    mode: PortMode = "http",
    path: str = "/",
    status: int | tuple[int, int] = (200, 399),
    host: str | None = None,
    interval: float | None = None,
) -> PortReady:
    """Waits until ``port`` answers inside the sandbox (see ``AsyncCommandHandle.wait_for_port``)."""
    if mode not in ("http", "tcp"):
        raise InvalidArgumentError(f"mode is 'http' or 'tcp', not {mode!r}", metadata={"field": "mode"})
    low, high = (status, status) if isinstance(status, int) else status
    request = pb.WaitForPortRequest(
        port=port,
        host=host or "",
        process_id=process_id or "",
        timeout_ms=_milliseconds(timeout),
        interval_ms=_milliseconds(interval, "interval"),
    )
    if mode == "http":
        request.http.CopyFrom(pb.HttpProbe(path=path, min_status=low, max_status=high))
    try:
        ready = await rpc.wait_for_port(request, metadata=rpc.metadata)
    except grpc.aio.AioRpcError as error:
        raise from_rpc_error(error, timeout=timeout) from error
    return PortReady(
        address=ready.address,
        http_status=ready.http_status,
        attempts=ready.attempts,
        waited=ready.waited.seconds + ready.waited.nanos / 1e9,
    )


async def wait_for_log(
    rpc: SandboxRpc,
    process_id: str,
    pattern: str | re.Pattern[str],
    *,
    timeout: float | None = None,
    stream: StreamName | Literal["both"] = "both",
    stdout_offset: int = 0,
    stderr_offset: int = 0,
) -> LogMatch:
    """Waits until a line of the process's output matches ``pattern`` (see ``AsyncCommandHandle.wait_for_log``)."""
    streams = {"both": pb.OUTPUT_STREAM_UNSPECIFIED, "stdout": pb.OUTPUT_STREAM_STDOUT, "stderr": pb.OUTPUT_STREAM_STDERR}
    if stream not in streams:
        raise InvalidArgumentError(f"stream is 'stdout', 'stderr' or 'both', not {stream!r}", metadata={"field": "stream"})
    request = pb.WaitForLogRequest(
        process_id=process_id,
        pattern=pattern_source(pattern),
        stream=streams[stream],
        stdout_offset=stdout_offset,
        stderr_offset=stderr_offset,
        timeout_ms=_milliseconds(timeout),
    )
    try:
        found = await rpc.wait_for_log(request, metadata=rpc.metadata)
    except grpc.aio.AioRpcError as error:
        raise from_rpc_error(error, process_id=process_id, timeout=timeout) from error
    return LogMatch(
        line=found.line,
        match=found.match,
        groups=tuple(group.text if group.HasField("text") else None for group in found.groups),
        named_groups=dict(found.named_groups),
        stream="stderr" if found.stream == pb.OUTPUT_STREAM_STDERR else "stdout",
        offset=found.offset,
        line_offset=found.line_offset,
    )


async def wait_for_exit(
    rpc: SandboxRpc, process_id: str, *, timeout: float | None = None
) -> tuple[ProcessExit, ProcessInfo | None]:
    """Waits until the process exits; returns its exit and its record (see ``AsyncCommandHandle.wait_for_exit``)."""
    request = pb.WaitForExitRequest(process_id=process_id, timeout_ms=_milliseconds(timeout))
    try:
        response = await rpc.wait_for_exit(request, metadata=rpc.metadata)
    except grpc.aio.AioRpcError as error:
        raise from_rpc_error(error, process_id=process_id, timeout=timeout) from error
    exit = ProcessExit.from_proto(response.exited)
    if exit is None:
        from .errors import SandboxError

        raise SandboxError("the daemon reported an exit without a code or a signal", code="NO_EXIT")
    return exit, ProcessInfo.from_proto(response.process) if response.HasField("process") else None


async def list_ports(rpc: SandboxRpc, *, process_id: str | None = None) -> list[ListeningPort]:
    """The TCP ports listening inside the sandbox, lowest first (see ``AsyncSandbox.list_ports``)."""
    try:
        response = await rpc.list_ports(pb.ListPortsRequest(process_id=process_id or ""), metadata=rpc.metadata)
    except grpc.aio.AioRpcError as error:
        raise from_rpc_error(error, process_id=process_id) from error
    return [
        ListeningPort(
            port=listed.port,
            address=listed.address,
            ipv6=listed.ipv6,
            pid=listed.pid or None,
            program=listed.program,
            process_id=listed.process_id or None,
        )
        for listed in response.ports
    ]
