"""sandboxd: the Python client of sandboxd, a command execution daemon for sandboxes.

Run a command and get its exit code and output, stream a command's events, start background processes and follow
them through handles that resume from byte offsets after a broken connection, feed them input and stop them; sync
(:class:`Sandbox`, :func:`connect`) and asyncio (:class:`AsyncSandbox`, :func:`connect_async`) with the same surface::

    import sandboxd

    with sandboxd.connect("http://127.0.0.1:7007", token=token) as sandbox:
        result = sandbox.exec("echo hello && echo oops >&2 && exit 3")
        print(result.exit_code, result.output.text)

Read, write, list and watch the files inside the daemon's workspace roots through ``sandbox.files``, streamed both ways.

The generated protobuf messages of ``sandbox.v1`` are :mod:`sandboxd.v1` (the file service's, :mod:`sandboxd.files_v1`).
"""

from ._async_sandbox import AsyncProcesses, AsyncSandbox, SandboxOptions
from ._files import AsyncFiles, AsyncFileWatch, WriteData
from ._files_sync import Files, FileWatch
from ._gen.sandbox.v1 import files_pb2 as files_v1
from ._gen.sandbox.v1 import sandbox_pb2 as v1
from ._handle import DEFAULT_MAX_RETAINED_BYTES, AsyncCommandHandle
from ._readiness import ListeningPort, LogMatch, PortReady
from ._reconnect import ReconnectPolicy
from ._sync import CommandHandle, Processes, Sandbox, connect, connect_async
from ._transport import DEFAULT_URL, TOKEN_VARIABLE, URL_VARIABLE, Keepalive, Tls
from .errors import (
    AuthenticationError,
    ContentMismatchError,
    CwdNotAccessibleError,
    CwdNotFoundError,
    CwdOutsideWorkspaceError,
    DirectoryNotEmptyError,
    ExecutionTimeoutError,
    FailedPreconditionError,
    FileChangedError,
    HostNotAllowedError,
    InvalidArgumentError,
    IsDirectoryError,
    LimitExceededError,
    NotDirectoryError,
    OffsetOutOfRangeError,
    OutputLostError,
    PathExistsError,
    PathNotAccessibleError,
    PathNotFoundError,
    PathOutsideWorkspaceError,
    PermissionDeniedError,
    ProcessAlreadyExistsError,
    ProcessExitedBeforeReadyError,
    ProcessNotFoundError,
    ProcessNotRunningError,
    ProcessReadyTimeoutError,
    PtyNotOpenError,
    ReadLimitError,
    ResourceExhaustedError,
    SandboxError,
    SandboxUnavailableError,
    ShuttingDownError,
    SpawnFailedError,
    StateNotRecordedError,
    StdinNotOpenError,
    StorageExhaustedError,
    SudoNotAllowedError,
    UnknownOptionError,
)
from .files import FileChange, FileChangeType, FileInfo, FileType, OverflowSource, WatchEndReason, WatchEvent, WatchOverflow
from .lifecycle import SandboxStatus
from .options import Command, ExecOptions, ProcessOptions, PtySize, ResourceLimits, Retention
from .output import InputAck, Output, OutputChunk, StreamDecoder, StreamName
from .records import (
    CommandResult,
    ExecEvent,
    ExecResult,
    ExitCause,
    OutputGap,
    OutputRetention,
    ProcessExit,
    ProcessInfo,
    ProcessLogs,
    ProcessStatus,
    ResourceUsage,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_RETAINED_BYTES",
    "DEFAULT_URL",
    "TOKEN_VARIABLE",
    "URL_VARIABLE",
    "AsyncCommandHandle",
    "AsyncFileWatch",
    "AsyncFiles",
    "AsyncProcesses",
    "AsyncSandbox",
    "AuthenticationError",
    "Command",
    "CommandHandle",
    "CommandResult",
    "ContentMismatchError",
    "CwdNotAccessibleError",
    "CwdNotFoundError",
    "CwdOutsideWorkspaceError",
    "DirectoryNotEmptyError",
    "ExecEvent",
    "ExecOptions",
    "ExecResult",
    "ExitCause",
    "ExecutionTimeoutError",
    "FailedPreconditionError",
    "FileChange",
    "FileChangeType",
    "FileChangedError",
    "FileInfo",
    "FileType",
    "FileWatch",
    "Files",
    "HostNotAllowedError",
    "InputAck",
    "InvalidArgumentError",
    "IsDirectoryError",
    "Keepalive",
    "LimitExceededError",
    "ListeningPort",
    "LogMatch",
    "NotDirectoryError",
    "OffsetOutOfRangeError",
    "Output",
    "OutputChunk",
    "OutputGap",
    "OutputLostError",
    "OutputRetention",
    "OverflowSource",
    "PathExistsError",
    "PathNotAccessibleError",
    "PathNotFoundError",
    "PathOutsideWorkspaceError",
    "PermissionDeniedError",
    "PortReady",
    "ProcessAlreadyExistsError",
    "ProcessExit",
    "ProcessExitedBeforeReadyError",
    "ProcessInfo",
    "ProcessLogs",
    "ProcessNotFoundError",
    "ProcessNotRunningError",
    "ProcessOptions",
    "ProcessReadyTimeoutError",
    "ProcessStatus",
    "ResourceLimits",
    "ResourceUsage",
    "Retention",
    "Processes",
    "PtyNotOpenError",
    "PtySize",
    "ReadLimitError",
    "ReconnectPolicy",
    "ResourceExhaustedError",
    "Sandbox",
    "SandboxError",
    "SandboxOptions",
    "SandboxStatus",
    "SandboxUnavailableError",
    "ShuttingDownError",
    "SpawnFailedError",
    "StateNotRecordedError",
    "StdinNotOpenError",
    "StorageExhaustedError",
    "StreamDecoder",
    "StreamName",
    "SudoNotAllowedError",
    "Tls",
    "UnknownOptionError",
    "WatchEndReason",
    "WatchEvent",
    "WatchOverflow",
    "WriteData",
    "connect",
    "connect_async",
    "files_v1",
    "v1",
]
