"""The exceptions of the SDK: one base, :class:`SandboxError`, and a subclass per failure a caller may branch on.

The daemon attaches a ``google.rpc.ErrorInfo`` detail to every failure (domain ``sandbox.v1``, a ``reason`` such as
``PROCESS_NOT_FOUND`` and string ``metadata``), sent in the ``grpc-status-details-bin`` trailer. The SDK reads it
with grpcio-status and picks the exception class by reason; when a daemon sends no detail (an older one) or an
unknown reason, the class follows the gRPC status code. Branch on the class or on ``reason``, never on the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, cast

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from .records import ProcessExit

#: The ErrorInfo domain of sandboxd's reasons.
ERROR_DOMAIN = "sandbox.v1"


class SandboxError(Exception):
    """SandboxError is the base of every error the SDK raises.

    ``code`` is a stable upper-case name: for a failed RPC the gRPC status code's name (``NOT_FOUND``,
    ``PERMISSION_DENIED``, ``UNAVAILABLE``...), otherwise a name documented where the error is raised
    (``INVALID_TRANSITION``, ``NOT_RUNNING``, ``NO_EXIT``, ``DETACHED``...). ``reason`` is the daemon's
    ``ErrorInfo`` reason when it sent one (``PROCESS_NOT_FOUND``, ``LIMIT_EXCEEDED``...), ``metadata`` its
    metadata. The original ``grpc.RpcError``, when there is one, is ``__cause__`` and ``rpc_error``.
    """

    #: The ``code`` of an error of this class made without one.
    default_code = "UNKNOWN"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        status_code: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(message)
        #: The daemon's (or the SDK's) message.
        self.message = message
        #: Stable upper-case name of the failure.
        self.code = code or self.default_code
        #: The ErrorInfo reason the daemon sent, or None.
        self.reason = reason
        #: The ErrorInfo metadata the daemon sent (empty when none).
        self.metadata: dict[str, str] = dict(metadata or {})
        #: The gRPC status code of a failed RPC, or None.
        self.status_code = status_code

    @property
    def rpc_error(self) -> grpc.RpcError | None:
        """The gRPC error this one was made from, if any."""
        cause = self.__cause__
        return cause if isinstance(cause, grpc.RpcError) else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r}, reason={self.reason!r})"


class ProcessNotFoundError(SandboxError):
    """The daemon knows no process of that id (``PROCESS_NOT_FOUND``, gRPC NOT_FOUND)."""

    default_code = "NOT_FOUND"

    @property
    def process_id(self) -> str | None:
        """The id asked for."""
        return self.metadata.get("process_id")


class ProcessAlreadyExistsError(SandboxError):
    """A live process already has that client-chosen id (``PROCESS_ALREADY_EXISTS``, gRPC ALREADY_EXISTS)."""

    default_code = "ALREADY_EXISTS"

    @property
    def process_id(self) -> str | None:
        """The id asked for."""
        return self.metadata.get("process_id") or self.metadata.get("tag")


class InvalidArgumentError(SandboxError, ValueError):
    """A request the daemon (or the SDK, before any call) refused as malformed (``INVALID_ARGUMENT``)."""

    default_code = "INVALID_ARGUMENT"

    @property
    def field(self) -> str | None:
        """The offending field, where known."""
        return self.metadata.get("field")


class UnknownOptionError(InvalidArgumentError, TypeError):
    """An option the call does not take, such as a misspelled ``timout=1`` (``INVALID_ARGUMENT``).

    It is a TypeError too, as Python's own "unexpected keyword argument" is: the SDK refuses it rather than run the
    command without the limit or id the caller meant, as the TypeScript client refuses an unknown option.
    """


class PermissionDeniedError(SandboxError, PermissionError):
    """The daemon refused the command (gRPC PERMISSION_DENIED); see the subclasses for the known reasons."""

    default_code = "PERMISSION_DENIED"


class CwdOutsideWorkspaceError(PermissionDeniedError):
    """The working directory resolves outside every workspace root (``CWD_OUTSIDE_WORKSPACE``)."""

    @property
    def cwd(self) -> str | None:
        """The working directory asked for."""
        return self.metadata.get("cwd")


class SudoNotAllowedError(PermissionDeniedError):
    """``sudo`` was asked of a daemon that does not allow it (``SUDO_NOT_ALLOWED``)."""


class FailedPreconditionError(SandboxError):
    """The process is not in a state for this call (gRPC FAILED_PRECONDITION); see the subclasses."""

    default_code = "FAILED_PRECONDITION"


class ProcessNotRunningError(FailedPreconditionError):
    """The process has exited: input, resizes and signals are refused (``PROCESS_NOT_RUNNING``)."""


class StdinNotOpenError(FailedPreconditionError):
    """The process has no stdin pipe, or it was closed (``STDIN_NOT_OPEN``)."""


class CwdNotFoundError(FailedPreconditionError):
    """The working directory does not exist or is not a directory (``CWD_NOT_FOUND``)."""

    @property
    def cwd(self) -> str | None:
        """The working directory asked for."""
        return self.metadata.get("cwd")


class CwdNotAccessibleError(PermissionDeniedError):
    """The command's user may not enter the working directory (``CWD_NOT_ACCESSIBLE``)."""

    @property
    def cwd(self) -> str | None:
        """The working directory asked for."""
        return self.metadata.get("cwd")


class HostNotAllowedError(PermissionDeniedError):
    """A daemon without a token answers loopback host names only (``HOST_NOT_ALLOWED``)."""


class PtyNotOpenError(FailedPreconditionError):
    """A resize for a process that has no PTY (``PTY_NOT_OPEN``)."""


class OffsetOutOfRangeError(SandboxError):
    """A stream was asked for from an offset beyond the bytes written so far (``OFFSET_OUT_OF_RANGE``)."""

    default_code = "OUT_OF_RANGE"


class SpawnFailedError(SandboxError):
    """The program could not be started (``SPAWN_FAILED``); ``errno`` names the system error."""

    default_code = "FAILED_PRECONDITION"

    @property
    def errno(self) -> str | None:
        """The system error's name, such as ``ENOENT``."""
        return self.metadata.get("errno")


class ResourceExhaustedError(SandboxError):
    """The daemon ran out of something (gRPC RESOURCE_EXHAUSTED); see the subclasses."""

    default_code = "RESOURCE_EXHAUSTED"


class LimitExceededError(ResourceExhaustedError):
    """A daemon limit refused the call (``LIMIT_EXCEEDED``)."""

    @property
    def limit(self) -> str | None:
        """The daemon flag's name, such as ``max-processes``."""
        return self.metadata.get("limit")

    @property
    def value(self) -> str | None:
        """The limit's value."""
        return self.metadata.get("value")


class StateNotRecordedError(ResourceExhaustedError):
    """The daemon's state directory could not record the process group, so nothing started
    (``STATE_NOT_RECORDED``); ``errno`` names the system error."""

    @property
    def errno(self) -> str | None:
        """The system error's name, such as ``ENOSPC``."""
        return self.metadata.get("errno")


class AuthenticationError(SandboxError):
    """The token is missing or wrong (``UNAUTHENTICATED``)."""

    default_code = "UNAUTHENTICATED"


class SandboxUnavailableError(SandboxError, ConnectionError):
    """The daemon could not be reached, or the connection broke under a call that cannot resume (UNAVAILABLE)."""

    default_code = "UNAVAILABLE"


class ShuttingDownError(SandboxUnavailableError):
    """The daemon is shutting down (``SHUTTING_DOWN``)."""


class ExecutionTimeoutError(SandboxError, TimeoutError):
    """A call's own deadline passed, or a bounded wait such as ``handle.wait(timeout=...)`` gave up.

    A command killed by its ``timeout`` option is not an error: its result has ``timed_out`` set and exit code 137.
    """

    def __init__(
        self,
        timeout: float | None,
        message: str | None = None,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        status_code: grpc.StatusCode | None = None,
    ) -> None:
        text = message or (f"timed out after {timeout:g} s" if timeout is not None else "timed out")
        super().__init__(text, code="EXECUTION_TIMEOUT", reason=reason, metadata=metadata, status_code=status_code)
        #: The time limit that passed, in seconds (None when unknown).
        self.timeout = timeout


class ProcessReadyTimeoutError(ExecutionTimeoutError):
    """A readiness wait (``wait_for_port``, ``wait_for_log``, ``wait_for_exit``) reached its ``timeout`` first
    (``WAIT_TIMED_OUT``), as the Cloudflare Sandbox SDK names it; the process runs on. Code ``PROCESS_READY_TIMEOUT``.

    It carries what the daemon reported: the process's last output lines and, for a port, what the last try found.
    """

    def __init__(
        self,
        message: str,
        *,
        metadata: Mapping[str, str],
        status_code: grpc.StatusCode | None = None,
    ) -> None:
        timeout = int(metadata.get("timeout_ms", "0")) / 1000
        super().__init__(timeout, message, reason="WAIT_TIMED_OUT", metadata=metadata, status_code=status_code)
        self.code = "PROCESS_READY_TIMEOUT"

    @property
    def process_id(self) -> str | None:
        """The process the wait was tied to; None for a port wait of none."""
        return self.metadata.get("process_id")

    @property
    def condition(self) -> str:
        """What was waited for (``"port 3000"``, ``"log /ready/"``, ``"exit"``)."""
        return self.metadata.get("waiting_for", "")

    @property
    def last_stdout(self) -> str:
        """The last lines of the process's stdout (at most 1 KiB); empty when none."""
        return self.metadata.get("last_stdout", "")

    @property
    def last_stderr(self) -> str:
        """The last lines of its stderr (at most 1 KiB); empty when none."""
        return self.metadata.get("last_stderr", "")

    @property
    def last_probe(self) -> str:
        """For a port, what the last try found at each address (``"127.0.0.1:3000: connection refused"``)."""
        return self.metadata.get("last_probe", "")


class OutputLostError(SandboxError):
    """Output of a background process was dropped by the daemon before this client read it.

    The daemon retains a bounded amount per process; a reader that is too slow or away too long meets a gap. The
    handle's offsets have been moved past the gap, so ``handle.reconnect()`` continues with the bytes after it.
    """

    def __init__(self, stream: Literal["stdout", "stderr"], offset: int, missed_bytes: int) -> None:
        super().__init__(
            f"{missed_bytes} bytes of {stream} from offset {offset} were dropped by the daemon before they were read",
            code="OUTPUT_LOST",
        )
        #: The stream that lost bytes.
        self.stream = stream
        #: Offset of the first lost byte.
        self.offset = offset
        #: How many bytes were lost.
        self.missed_bytes = missed_bytes


class PathNotFoundError(SandboxError, FileNotFoundError):
    """A path of a file call, or one of its parents, does not exist (``PATH_NOT_FOUND``, gRPC NOT_FOUND).

    It is a FileNotFoundError too, so ``except FileNotFoundError`` catches it as it catches a local one.
    """

    default_code = "NOT_FOUND"

    @property
    def path(self) -> str | None:
        """The path, as requested."""
        return self.metadata.get("path")


class PathExistsError(SandboxError, FileExistsError):
    """Something exists at a path the call must create: a write with ``overwrite=False``, a mkdir without
    ``parents``, a rename without ``overwrite`` (``PATH_ALREADY_EXISTS``, gRPC ALREADY_EXISTS); a FileExistsError
    too."""

    default_code = "ALREADY_EXISTS"

    @property
    def path(self) -> str | None:
        """The path, as requested."""
        return self.metadata.get("path")


class PathOutsideWorkspaceError(PermissionDeniedError):
    """A path resolves outside every workspace root: through ``..``, as an absolute path or through a symlink
    (``PATH_OUTSIDE_WORKSPACE``)."""

    @property
    def path(self) -> str | None:
        """The path, as requested."""
        return self.metadata.get("path")


class PathNotAccessibleError(PermissionDeniedError):
    """The daemon's user (the ``--user`` one, when set) may not do this to the path (``PATH_NOT_ACCESSIBLE``)."""

    @property
    def path(self) -> str | None:
        """The path."""
        return self.metadata.get("path")


class IsDirectoryError(FailedPreconditionError, IsADirectoryError):
    """The path is a directory and the call needs something else (``IS_A_DIRECTORY``); an IsADirectoryError too."""


class NotDirectoryError(FailedPreconditionError, NotADirectoryError):
    """The path, or one of its parents, is not a directory and the call needs one (``NOT_A_DIRECTORY``); a
    NotADirectoryError too."""


class DirectoryNotEmptyError(FailedPreconditionError):
    """The directory has entries: a remove without ``recursive`` (``DIRECTORY_NOT_EMPTY``)."""


class StorageExhaustedError(ResourceExhaustedError):
    """The filesystem is full, a quota is reached or the file would be too large (``STORAGE_EXHAUSTED``); a write
    that fails this way leaves the old file intact. ``errno`` names the system error."""

    @property
    def errno(self) -> str | None:
        """``ENOSPC``, ``EDQUOT`` or ``EFBIG``."""
        return self.metadata.get("errno")


class ContentMismatchError(SandboxError):
    """A write's bytes do not match its ``expected_size`` or ``expected_sha256``; nothing was written
    (``CONTENT_MISMATCH``, gRPC DATA_LOSS)."""

    default_code = "DATA_LOSS"


class FileChangedError(SandboxError):
    """A read could not resume after its connection broke because the file changed meanwhile (its size or
    modification time): the bytes already read and those after them would not belong to one file. Code
    ``FILE_CHANGED``."""

    default_code = "FILE_CHANGED"


class ProcessExitedBeforeReadyError(FailedPreconditionError):
    """The process a readiness wait was tied to exited (or never started) before the condition was met
    (``PROCESS_EXITED``, gRPC FAILED_PRECONDITION), as the Cloudflare Sandbox SDK names it; the wait failed as soon as
    the exit was known. ``exit`` is the daemon's exit record; the last output lines are in ``last_stdout`` and
    ``last_stderr``."""

    #: How the process ended, as the daemon recorded it (None if it sent no record); set by ``from_rpc_error``.
    exit: ProcessExit | None = None

    @property
    def process_id(self) -> str | None:
        """The process."""
        return self.metadata.get("process_id")

    @property
    def condition(self) -> str:
        """What was waited for (``"port 3000"``, ``"log /ready/"``)."""
        return self.metadata.get("waiting_for", "")

    @property
    def exit_code(self) -> int | None:
        """The exit code (128 + the signal's number after a signal), as in ``ProcessExit.exit_code``."""
        if self.exit is not None:
            return self.exit.exit_code
        text = self.metadata.get("exit_code")
        return int(text) if text is not None else None

    @property
    def last_stdout(self) -> str:
        """The last lines of the process's stdout (at most 1 KiB); empty when none."""
        return self.metadata.get("last_stdout", "")

    @property
    def last_stderr(self) -> str:
        """The last lines of its stderr (at most 1 KiB); empty when none."""
        return self.metadata.get("last_stderr", "")


class ReadLimitError(SandboxError):
    """The daemon stopped a read of a file without a size (a device, a /proc file) at its
    ``--max-unsized-read-bytes`` before the end; ask for a ``length`` to read such a file on purpose. Code
    ``READ_LIMIT_REACHED``."""

    default_code = "READ_LIMIT_REACHED"


_BY_REASON: dict[str, type[SandboxError]] = {
    "PROCESS_NOT_FOUND": ProcessNotFoundError,
    "PROCESS_ALREADY_EXISTS": ProcessAlreadyExistsError,
    "LIMIT_EXCEEDED": LimitExceededError,
    "INVALID_ARGUMENT": InvalidArgumentError,
    "CWD_OUTSIDE_WORKSPACE": CwdOutsideWorkspaceError,
    "SUDO_NOT_ALLOWED": SudoNotAllowedError,
    "PROCESS_NOT_RUNNING": ProcessNotRunningError,
    "STDIN_NOT_OPEN": StdinNotOpenError,
    "UNAUTHENTICATED": AuthenticationError,
    "SHUTTING_DOWN": ShuttingDownError,
    "SPAWN_FAILED": SpawnFailedError,
    "CWD_NOT_FOUND": CwdNotFoundError,
    "CWD_NOT_ACCESSIBLE": CwdNotAccessibleError,
    "PTY_NOT_OPEN": PtyNotOpenError,
    "OFFSET_OUT_OF_RANGE": OffsetOutOfRangeError,
    "HOST_NOT_ALLOWED": HostNotAllowedError,
    "STATE_NOT_RECORDED": StateNotRecordedError,
    "PATH_NOT_FOUND": PathNotFoundError,
    "PATH_ALREADY_EXISTS": PathExistsError,
    "PATH_OUTSIDE_WORKSPACE": PathOutsideWorkspaceError,
    "PATH_NOT_ACCESSIBLE": PathNotAccessibleError,
    "IS_A_DIRECTORY": IsDirectoryError,
    "NOT_A_DIRECTORY": NotDirectoryError,
    "DIRECTORY_NOT_EMPTY": DirectoryNotEmptyError,
    "STORAGE_EXHAUSTED": StorageExhaustedError,
    "CONTENT_MISMATCH": ContentMismatchError,
}

_BY_CODE: dict[grpc.StatusCode, type[SandboxError]] = {
    grpc.StatusCode.ALREADY_EXISTS: ProcessAlreadyExistsError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.UNAVAILABLE: SandboxUnavailableError,
}


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ``google.rpc.ErrorInfo`` detail of a failed call (the ``sandbox.v1`` one first), or None.

    Read from the ``grpc-status-details-bin`` trailer with grpcio-status; a trailer whose code or message does not
    match the call's (which grpcio-status rejects) is still read, as a detail is worth more than that check.
    """
    status: status_pb2.Status | None
    try:
        # grpcio-status reads code(), details() and trailing_metadata(), which both the sync and the aio errors have.
        status = rpc_status.from_call(cast(grpc.Call, error))
    except ValueError:
        status = _raw_status(error)
    if status is None:
        return None
    found: error_details_pb2.ErrorInfo | None = None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            if info.domain == ERROR_DOMAIN:
                return info
            found = found or info
    return found


def _raw_status(error: grpc.RpcError) -> status_pb2.Status | None:
    metadata = cast(grpc.Call, error).trailing_metadata() or ()
    for key, value in metadata:
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None


def from_rpc_error(
    error: grpc.RpcError,
    *,
    process_id: str | None = None,
    timeout: float | None = None,
) -> SandboxError:
    """Converts a failed gRPC call into the matching :class:`SandboxError` subclass.

    The class follows the ErrorInfo reason when the daemon sent a known one, else the status code: NOT_FOUND about a
    process is :class:`ProcessNotFoundError`, DEADLINE_EXCEEDED :class:`ExecutionTimeoutError`, and so on. What the
    call was about (``process_id``, its ``timeout`` in seconds) fills in what the daemon's metadata lacks. The
    caller raises the result ``from error``.
    """
    call = cast(grpc.Call, error)
    status_code = call.code()
    message = call.details() or status_code.name.lower().replace("_", " ")
    info = error_info(error)
    reason = info.reason if info is not None and info.reason else None
    metadata: dict[str, str] = dict(info.metadata) if info is not None else {}
    if process_id is not None:
        metadata.setdefault("process_id", process_id)
    cls: type[SandboxError]
    if reason == "WAIT_TIMED_OUT":
        return ProcessReadyTimeoutError(message, metadata=metadata, status_code=status_code)
    if reason == "PROCESS_EXITED":
        exited = ProcessExitedBeforeReadyError(message, code=status_code.name, reason=reason, metadata=metadata, status_code=status_code)
        exited.exit = _exit_record(error)
        return exited
    if status_code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ExecutionTimeoutError(timeout, message, reason=reason, metadata=metadata, status_code=status_code)
    if reason is not None and reason in _BY_REASON:
        cls = _BY_REASON[reason]
    elif status_code == grpc.StatusCode.NOT_FOUND:
        cls = ProcessNotFoundError if "process_id" in metadata else SandboxError
    else:
        cls = _BY_CODE.get(status_code, SandboxError)
    return cls(message, code=status_code.name, reason=reason, metadata=metadata, status_code=status_code)



def _exit_record(error: grpc.RpcError) -> ProcessExit | None:
    """The ``sandbox.v1.ProcessExited`` detail of a failed wait, as a ProcessExit, or None."""
    try:
        status = rpc_status.from_call(cast(grpc.Call, error))
    except ValueError:
        status = _raw_status(error)
    for detail in status.details if status is not None else ():
        exited = pb.ProcessExited()
        if detail.Unpack(exited):
            return ProcessExit.from_proto(exited)
    return None
