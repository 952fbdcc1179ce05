"""What the daemon reports about a process: its status, its record and how it ended, and a finished command's result."""

from __future__ import annotations

import datetime
import signal as signals
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from google.protobuf import duration_pb2, timestamp_pb2

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from .output import Output, StreamName


class ProcessStatus(StrEnum):
    """ProcessStatus is the lifecycle state of a process."""

    #: Being spawned.
    STARTING = "starting"
    #: Spawned and not yet exited.
    RUNNING = "running"
    #: Exited with code 0.
    COMPLETED = "completed"
    #: Exited with a non-zero code.
    FAILED = "failed"
    #: Ended by a signal: a kill on request, a timeout or a cancel.
    KILLED = "killed"
    #: Could not be started.
    ERROR = "error"

    @classmethod
    def from_proto(cls, status: int) -> ProcessStatus:
        """Converts a protobuf status; ``ERROR`` for an unspecified or unknown value."""
        return _FROM_PROTO.get(status, ProcessStatus.ERROR)

    def to_proto(self) -> pb.ProcessStatus:
        """The protobuf enum value."""
        return _TO_PROTO[self]


_TO_PROTO: dict[ProcessStatus, pb.ProcessStatus] = {
    ProcessStatus.STARTING: pb.PROCESS_STATUS_STARTING,
    ProcessStatus.RUNNING: pb.PROCESS_STATUS_RUNNING,
    ProcessStatus.COMPLETED: pb.PROCESS_STATUS_COMPLETED,
    ProcessStatus.FAILED: pb.PROCESS_STATUS_FAILED,
    ProcessStatus.KILLED: pb.PROCESS_STATUS_KILLED,
    ProcessStatus.ERROR: pb.PROCESS_STATUS_ERROR,
}
_FROM_PROTO: dict[int, ProcessStatus] = {int(value): status for status, value in _TO_PROTO.items()}


class ExitCause(StrEnum):
    """ExitCause says why a process ended; ``status``, ``exit_code`` and ``signal`` say how."""

    #: It exited on its own, with its exit code (zero or not).
    EXITED = "exited"
    #: A signal the daemon did not send ended it: another process in the sandbox, or the command itself.
    SIGNALED = "signaled"
    #: A client asked for its end (kill, kill-all, SendInput's signal, a cancelled or disconnected call): see
    #: ``ProcessExit.kill_origin``.
    KILLED_ON_REQUEST = "killed_on_request"
    #: Its timeout expired and the daemon killed it.
    TIMED_OUT = "timed_out"
    #: The kernel killed a process of the command for lack of memory in the command's own memory cgroup (read
    #: from the cgroup, never guessed from SIGKILL).
    OUT_OF_MEMORY = "out_of_memory"
    #: The daemon was shutting down and killed it.
    DAEMON_SHUTDOWN = "daemon_shutdown"
    #: It never ran its program (or was stopped as it started): see ``start_stage`` and ``errno``.
    START_FAILED = "start_failed"
    #: The daemon cannot tell (it lost track of the process, or is older than this field).
    UNKNOWN = "unknown"

    @classmethod
    def from_proto(cls, cause: int) -> ExitCause:
        """Converts a protobuf cause; ``UNKNOWN`` for an unspecified or unknown value."""
        return _CAUSE_FROM_PROTO.get(cause, ExitCause.UNKNOWN)


_CAUSE_FROM_PROTO: dict[int, ExitCause] = {
    int(pb.EXIT_CAUSE_EXITED): ExitCause.EXITED,
    int(pb.EXIT_CAUSE_SIGNALED): ExitCause.SIGNALED,
    int(pb.EXIT_CAUSE_KILLED_ON_REQUEST): ExitCause.KILLED_ON_REQUEST,
    int(pb.EXIT_CAUSE_TIMED_OUT): ExitCause.TIMED_OUT,
    int(pb.EXIT_CAUSE_OUT_OF_MEMORY): ExitCause.OUT_OF_MEMORY,
    int(pb.EXIT_CAUSE_DAEMON_SHUTDOWN): ExitCause.DAEMON_SHUTDOWN,
    int(pb.EXIT_CAUSE_START_FAILED): ExitCause.START_FAILED,
    int(pb.EXIT_CAUSE_UNKNOWN): ExitCause.UNKNOWN,
}


def _enum_name(value: int, names: dict[int, str], prefix: str) -> str | None:
    """The lower-case name of a protobuf enum value without its prefix; None for 0 (unspecified)."""
    if value == 0:
        return None
    name = names.get(value)
    return name.removeprefix(prefix).lower() if name is not None else None


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """ResourceUsage is what a command's whole process tree used, read by the daemon from the command's own cgroups.

    A figure the daemon cannot tell on its machine is None: unknown, never zero.
    """

    #: CPU time in user mode, in seconds.
    cpu_user: float | None
    #: CPU time in the kernel on its behalf, in seconds.
    cpu_system: float | None
    #: The most memory it used at once, in bytes (page cache included).
    memory_peak_bytes: int | None
    #: Memory in use now, in bytes (a running process's live reading only).
    memory_current_bytes: int | None
    #: Bytes read from block devices.
    io_read_bytes: int | None
    #: Bytes written to block devices.
    io_write_bytes: int | None
    #: How many of its processes the kernel killed for lack of memory.
    oom_kills: int | None

    @classmethod
    def from_proto(cls, usage: pb.ResourceUsage) -> ResourceUsage:
        """Converts a ResourceUsage message; absent figures are None."""

        def number(field: str) -> int | None:
            return int(getattr(usage, field)) if usage.HasField(field) else None

        def seconds(field: str) -> float | None:
            micros = number(field)
            return None if micros is None else micros / 1_000_000

        return cls(
            cpu_user=seconds("cpu_user_us"),
            cpu_system=seconds("cpu_system_us"),
            memory_peak_bytes=number("memory_peak_bytes"),
            memory_current_bytes=number("memory_current_bytes"),
            io_read_bytes=number("io_read_bytes"),
            io_write_bytes=number("io_write_bytes"),
            oom_kills=number("oom_kills"),
        )


@dataclass(frozen=True, slots=True)
class OutputGap:
    """OutputGap is output that was dropped: ``missed_bytes`` bytes of ``stream`` from byte ``offset`` on.

    The daemon keeps the first bytes of each stream (its head) and the last (the tail), so a stream has at most one
    gap, between them.
    """

    #: The stream that lost bytes.
    stream: StreamName
    #: Offset of the first byte dropped.
    offset: int
    #: How many bytes were dropped; the next kept byte is at ``offset + missed_bytes``.
    missed_bytes: int

    @classmethod
    def from_proto(cls, gap: pb.OutputGap) -> OutputGap:
        """Converts an OutputGap message."""
        stream: StreamName = "stderr" if gap.stream == pb.OUTPUT_STREAM_STDERR else "stdout"
        return cls(stream=stream, offset=gap.offset, missed_bytes=gap.missed_bytes)


@dataclass(frozen=True, slots=True)
class OutputRetention:
    """How much of a process's output the daemon keeps: the first ``head_bytes`` of each stream, the last
    ``tail_bytes`` of both."""

    #: Bytes kept from the start of each stream.
    head_bytes: int
    #: Bytes kept from the end of the output, both streams together.
    tail_bytes: int


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """ProcessExit says how a process ended, as the daemon reported it."""

    #: Final status: completed, failed, killed or error.
    status: ProcessStatus
    #: The exit code; a process ended by a signal reports 128 + the signal's number (137 for SIGKILL), as a shell
    #: does, with ``signal`` set. A program that was not found is 127.
    exit_code: int
    #: Name of the signal that ended it (``"SIGKILL"``), None when it exited on its own.
    signal: str | None
    #: Whether it was killed because its timeout expired.
    timed_out: bool
    #: Whether it was killed on request (kill, cancel, shutdown).
    killed: bool
    #: When it started.
    started_at: datetime.datetime
    #: When it ended.
    ended_at: datetime.datetime
    #: How long it ran, in seconds.
    duration: float
    #: Total bytes written to stdout.
    stdout_bytes: int
    #: Total bytes written to stderr.
    stderr_bytes: int
    #: Why it could not start, for status error.
    error: str | None
    #: What its whole process tree used, from its own cgroups; None where the daemon has none to read.
    usage: ResourceUsage | None = None
    #: Output the daemon's record dropped, at most one gap per stream (between the first bytes it keeps and the
    #: last): what ``logs()`` cannot return. Empty from ``exec()``, which hands the client every byte.
    dropped: tuple[OutputGap, ...] = ()
    #: Why it ended (see :class:`ExitCause`); ``UNKNOWN`` from a daemon older than this field.
    cause: ExitCause = ExitCause.UNKNOWN
    #: For ``KILLED_ON_REQUEST``: what asked for the kill (``"kill_process"``, ``"kill_all"``, ``"cancel"``,
    #: ``"disconnect"``, ``"deadline"``, ``"send_input"``).
    kill_origin: str | None = None
    #: For ``START_FAILED``: the step that failed (``"cwd"``, ``"user"``, ``"exec"``, ``"cgroup"``, ``"limits"``,
    #: ``"spawn"``, ``"state"``).
    start_stage: str | None = None
    #: For ``START_FAILED``: the errno name the step failed with (``"ENOENT"``), when it had one.
    errno: str | None = None

    @classmethod
    def from_proto(cls, exited: pb.ProcessExited) -> ProcessExit | None:
        """Converts a ProcessExited message; None when it carries neither an exit code nor a known signal."""
        code = exit_code_of(exited)
        if code is None:
            return None
        started = _time(exited.start_time) if exited.HasField("start_time") else _EPOCH
        ended = _time(exited.end_time) if exited.HasField("end_time") else started
        duration = _seconds(exited.duration) if exited.HasField("duration") else (ended - started).total_seconds()
        return cls(
            status=ProcessStatus.from_proto(exited.status),
            exit_code=code,
            signal=exited.signal or None,
            timed_out=exited.timed_out,
            killed=exited.killed,
            started_at=started,
            ended_at=ended,
            duration=duration,
            stdout_bytes=exited.stdout_bytes,
            stderr_bytes=exited.stderr_bytes,
            error=exited.error or None,
            usage=ResourceUsage.from_proto(exited.usage) if exited.HasField("usage") else None,
            dropped=tuple(OutputGap.from_proto(gap) for gap in exited.dropped),
            cause=ExitCause.from_proto(exited.cause),
            kill_origin=_enum_name(exited.cause_detail.kill_origin, _KILL_ORIGINS, "KILL_ORIGIN_"),
            start_stage=_enum_name(exited.cause_detail.start_stage, _START_STAGES, "START_STAGE_"),
            errno=exited.cause_detail.errno or None,
        )


_KILL_ORIGINS: dict[int, str] = {value.number: value.name for value in pb.KillOrigin.DESCRIPTOR.values}
_START_STAGES: dict[int, str] = {value.number: value.name for value in pb.StartStage.DESCRIPTOR.values}


def exit_code_of(exited: pb.ProcessExited) -> int | None:
    """The exit code to report: the process's own, else 128 + the number of the signal that ended it, else None."""
    if exited.HasField("exit_code"):
        return exited.exit_code
    try:
        return 128 + signals.Signals[exited.signal].value
    except KeyError:
        return None


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """ProcessInfo is what the daemon's record said about a process when it was last seen."""

    #: The process id: client-chosen or a UUID.
    process_id: str
    #: Operating-system pid, also its process group id; None if never spawned.
    pid: int | None
    #: The command as given.
    command: str
    #: The arguments (argv form); empty for a shell command line.
    args: tuple[str, ...]
    #: Status when last seen.
    status: ProcessStatus
    #: Session id, if any.
    session_id: str | None
    #: Resolved working directory.
    cwd: str
    #: Whether it runs in a PTY.
    pty: bool
    #: Whether its stdin is open for input.
    stdin: bool
    #: When it started.
    started_at: datetime.datetime
    #: Whether the record is removed automatically after exit.
    auto_cleanup: bool
    #: Bytes written to stdout so far.
    stdout_bytes: int
    #: Bytes written to stderr so far.
    stderr_bytes: int
    #: How it ended; None while running.
    exit: ProcessExit | None
    #: What it has used so far, read live (``get_process`` of a running process); its end's usage is in ``exit``.
    usage: ResourceUsage | None = None
    #: How much of its output the daemon keeps; None from a daemon that does not say.
    retention: OutputRetention | None = None

    @classmethod
    def from_proto(cls, info: pb.ProcessInfo) -> ProcessInfo:
        """Converts a ProcessInfo message."""
        return cls(
            process_id=info.process_id,
            pid=info.pid or None,
            command=info.command,
            args=tuple(info.args),
            status=ProcessStatus.from_proto(info.status),
            session_id=info.session_id or None,
            cwd=info.cwd,
            pty=info.pty,
            stdin=info.stdin,
            started_at=_time(info.start_time) if info.HasField("start_time") else datetime.datetime.now(datetime.UTC),
            auto_cleanup=info.auto_cleanup,
            stdout_bytes=info.stdout_bytes,
            stderr_bytes=info.stderr_bytes,
            exit=ProcessExit.from_proto(info.exit) if info.HasField("exit") else None,
            usage=ResourceUsage.from_proto(info.usage) if info.HasField("usage") else None,
            retention=OutputRetention(head_bytes=info.retention.head_bytes, tail_bytes=info.retention.tail_bytes)
            if info.HasField("retention")
            else None,
        )

    @property
    def command_line(self) -> str:
        """The command and its arguments, for display."""
        return " ".join((self.command, *self.args))


@dataclass(frozen=True, slots=True)
class CommandResult:
    """CommandResult is a command that has exited, with what it printed: what ``exec()`` and ``handle.wait()`` return.

    ``exit_code`` is always an int: the process's own exit code, or 128 + the signal number when a signal ended it
    (137 for SIGKILL, as a timeout reports it), with ``signal`` naming the signal. A non-zero exit is data, not an
    exception. ``stdout``, ``stderr`` and ``output`` (both joined in arrival order, as the Together sandbox SDK's output) are
    :class:`~sandboxd.Output` bytes with a ``.text`` helper; with ``pty`` everything is in stdout.

    A background process's handle keeps at most ``max_retained_bytes`` of output (16 MiB by default): beyond it the
    oldest is dropped, ``truncated`` is true, ``dropped_bytes`` says how much of each stream is missing and
    ``dropped`` where. ``exec()`` receives and keeps every byte, so only the client drops; what the daemon's record
    kept for later readers (its head and tail) is ``exit.dropped``.
    """

    #: The process id.
    process_id: str
    #: The command line that ran.
    command: str
    #: The session it ran in, if any.
    session_id: str | None
    #: How it ended.
    exit: ProcessExit
    #: Standard output.
    stdout: Output
    #: Standard error.
    stderr: Output
    #: Both streams joined in the order their chunks arrived.
    output: Output
    #: Bytes of each stream dropped from the front because of the handle's ``max_retained_bytes``.
    dropped_bytes: dict[StreamName, int]
    #: What this result lacks, where: the ranges ``dropped_bytes`` counts, stdout's first.
    dropped: tuple[OutputGap, ...] = ()

    @property
    def exit_code(self) -> int:
        """The exit code; 128 + the signal number when a signal ended the process."""
        return self.exit.exit_code

    @property
    def success(self) -> bool:
        """Whether the exit code is 0."""
        return self.exit.exit_code == 0

    @property
    def status(self) -> ProcessStatus:
        """Final status: completed, failed, killed or error."""
        return self.exit.status

    @property
    def signal(self) -> str | None:
        """Name of the signal that ended the process (``"SIGKILL"``), None when it exited."""
        return self.exit.signal

    @property
    def timed_out(self) -> bool:
        """Whether the process was killed because its timeout expired."""
        return self.exit.timed_out

    @property
    def cause(self) -> ExitCause:
        """Why the process ended (see :class:`ExitCause`); ``exit`` has its detail."""
        return self.exit.cause

    @property
    def duration(self) -> float:
        """How long the process ran, in seconds."""
        return self.exit.duration

    @property
    def truncated(self) -> bool:
        """Whether older output was dropped to respect the handle's ``max_retained_bytes``."""
        return any(self.dropped_bytes.values())


#: The result of ``exec()``: the same type as a handle's result, named as the Cloudflare Sandbox SDK names it.
ExecResult = CommandResult


@dataclass(frozen=True, slots=True)
class ProcessLogs:
    """ProcessLogs is a snapshot of the output the daemon retains for a process: per stream its first bytes (the
    head), at most one gap, and its last bytes (the tail). ``stdout`` and ``stderr`` run from their offsets to the
    newest byte; where a gap lies before them, the head is in ``stdout_head``/``stderr_head`` and the gap in
    ``dropped``."""

    #: The process id.
    process_id: str
    #: Retained stdout up to the newest byte: everything kept without a gap, else the tail after it.
    stdout: Output
    #: Retained stderr, as ``stdout``.
    stderr: Output
    #: Offset of the first byte of ``stdout`` (bytes before it are in ``stdout_head`` or were dropped).
    stdout_offset: int
    #: Offset of the first byte of ``stderr``.
    stderr_offset: int
    #: The record.
    process: ProcessInfo | None
    #: The first stdout bytes, from offset 0, when a gap separates them from ``stdout``; empty otherwise.
    stdout_head: Output = Output(b"")
    #: The first stderr bytes, as ``stdout_head``.
    stderr_head: Output = Output(b"")
    #: What was dropped, at most one gap per stream, stdout's first.
    dropped: tuple[OutputGap, ...] = ()

    @property
    def truncated(self) -> bool:
        """Whether the daemon dropped any of the output."""
        return bool(self.dropped)


_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def _time(timestamp: timestamp_pb2.Timestamp) -> datetime.datetime:
    return timestamp.ToDatetime(tzinfo=datetime.UTC)


def _seconds(duration: duration_pb2.Duration) -> float:
    return duration.seconds + duration.nanos / 1e9


@dataclass(frozen=True, slots=True)
class ExecEvent:
    """ExecEvent is one event of ``exec_stream()``, as the Cloudflare Sandbox SDK's: ``start``, then ``stdout``/``stderr``
    output, then ``complete`` with the result. A failure is raised from the loop rather than sent as an event."""

    #: What happened.
    type: Literal["start", "stdout", "stderr", "complete"]
    #: When, on this machine.
    timestamp: datetime.datetime
    #: The bytes, for stdout and stderr (empty for the text a decoder flushed at the end).
    data: bytes = b""
    #: The bytes as text, decoded incrementally per stream (never a split character).
    text: str = ""
    #: The command line, for start.
    command: str | None = None
    #: The process id, for start.
    process_id: str | None = None
    #: The exit code, for complete.
    exit_code: int | None = None
    #: The result, for complete.
    result: CommandResult | None = None
