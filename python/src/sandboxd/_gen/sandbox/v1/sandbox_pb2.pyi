import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_PROCESS_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_PROCESS_ALREADY_EXISTS: _ClassVar[ErrorReason]
    ERROR_REASON_LIMIT_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_ARGUMENT: _ClassVar[ErrorReason]
    ERROR_REASON_CWD_OUTSIDE_WORKSPACE: _ClassVar[ErrorReason]
    ERROR_REASON_SUDO_NOT_ALLOWED: _ClassVar[ErrorReason]
    ERROR_REASON_PROCESS_NOT_RUNNING: _ClassVar[ErrorReason]
    ERROR_REASON_STDIN_NOT_OPEN: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHENTICATED: _ClassVar[ErrorReason]
    ERROR_REASON_SHUTTING_DOWN: _ClassVar[ErrorReason]
    ERROR_REASON_SPAWN_FAILED: _ClassVar[ErrorReason]
    ERROR_REASON_CWD_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_CWD_NOT_ACCESSIBLE: _ClassVar[ErrorReason]
    ERROR_REASON_PTY_NOT_OPEN: _ClassVar[ErrorReason]
    ERROR_REASON_OFFSET_OUT_OF_RANGE: _ClassVar[ErrorReason]
    ERROR_REASON_HOST_NOT_ALLOWED: _ClassVar[ErrorReason]
    ERROR_REASON_STATE_NOT_RECORDED: _ClassVar[ErrorReason]
    ERROR_REASON_CANCELED: _ClassVar[ErrorReason]
    ERROR_REASON_SERVICE_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_INTERNAL: _ClassVar[ErrorReason]
    ERROR_REASON_DEADLINE_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_PROTOCOL_ERROR: _ClassVar[ErrorReason]
    ERROR_REASON_PATH_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_PATH_ALREADY_EXISTS: _ClassVar[ErrorReason]
    ERROR_REASON_PATH_OUTSIDE_WORKSPACE: _ClassVar[ErrorReason]
    ERROR_REASON_PATH_NOT_ACCESSIBLE: _ClassVar[ErrorReason]
    ERROR_REASON_IS_A_DIRECTORY: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_A_DIRECTORY: _ClassVar[ErrorReason]
    ERROR_REASON_DIRECTORY_NOT_EMPTY: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_A_REGULAR_FILE: _ClassVar[ErrorReason]
    ERROR_REASON_STORAGE_EXHAUSTED: _ClassVar[ErrorReason]
    ERROR_REASON_CONTENT_MISMATCH: _ClassVar[ErrorReason]
    ERROR_REASON_CROSS_DEVICE: _ClassVar[ErrorReason]
    ERROR_REASON_WORKSPACE_ROOT: _ClassVar[ErrorReason]
    ERROR_REASON_READ_ONLY_FILESYSTEM: _ClassVar[ErrorReason]
    ERROR_REASON_SYMLINK_LOOP: _ClassVar[ErrorReason]
    ERROR_REASON_FILE_BUSY: _ClassVar[ErrorReason]
    ERROR_REASON_FILE_SERVICE_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_LIMIT_ABOVE_CAP: _ClassVar[ErrorReason]
    ERROR_REASON_LIMIT_NOT_ENFORCEABLE: _ClassVar[ErrorReason]
    ERROR_REASON_RETENTION_ABOVE_LIMIT: _ClassVar[ErrorReason]
    ERROR_REASON_WAIT_TIMED_OUT: _ClassVar[ErrorReason]
    ERROR_REASON_PROCESS_EXITED: _ClassVar[ErrorReason]
    ERROR_REASON_PATTERN_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_PORTS_UNAVAILABLE: _ClassVar[ErrorReason]

class ProcessStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROCESS_STATUS_UNSPECIFIED: _ClassVar[ProcessStatus]
    PROCESS_STATUS_STARTING: _ClassVar[ProcessStatus]
    PROCESS_STATUS_RUNNING: _ClassVar[ProcessStatus]
    PROCESS_STATUS_COMPLETED: _ClassVar[ProcessStatus]
    PROCESS_STATUS_FAILED: _ClassVar[ProcessStatus]
    PROCESS_STATUS_KILLED: _ClassVar[ProcessStatus]
    PROCESS_STATUS_ERROR: _ClassVar[ProcessStatus]

class OutputStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_STREAM_UNSPECIFIED: _ClassVar[OutputStream]
    OUTPUT_STREAM_STDOUT: _ClassVar[OutputStream]
    OUTPUT_STREAM_STDERR: _ClassVar[OutputStream]

class ExitCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXIT_CAUSE_UNSPECIFIED: _ClassVar[ExitCause]
    EXIT_CAUSE_EXITED: _ClassVar[ExitCause]
    EXIT_CAUSE_SIGNALED: _ClassVar[ExitCause]
    EXIT_CAUSE_KILLED_ON_REQUEST: _ClassVar[ExitCause]
    EXIT_CAUSE_TIMED_OUT: _ClassVar[ExitCause]
    EXIT_CAUSE_OUT_OF_MEMORY: _ClassVar[ExitCause]
    EXIT_CAUSE_DAEMON_SHUTDOWN: _ClassVar[ExitCause]
    EXIT_CAUSE_START_FAILED: _ClassVar[ExitCause]
    EXIT_CAUSE_UNKNOWN: _ClassVar[ExitCause]

class StartStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    START_STAGE_UNSPECIFIED: _ClassVar[StartStage]
    START_STAGE_CWD: _ClassVar[StartStage]
    START_STAGE_USER: _ClassVar[StartStage]
    START_STAGE_EXEC: _ClassVar[StartStage]
    START_STAGE_CGROUP: _ClassVar[StartStage]
    START_STAGE_LIMITS: _ClassVar[StartStage]
    START_STAGE_SPAWN: _ClassVar[StartStage]
    START_STAGE_STATE: _ClassVar[StartStage]

class KillOrigin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KILL_ORIGIN_UNSPECIFIED: _ClassVar[KillOrigin]
    KILL_ORIGIN_KILL_PROCESS: _ClassVar[KillOrigin]
    KILL_ORIGIN_KILL_ALL: _ClassVar[KillOrigin]
    KILL_ORIGIN_CANCEL: _ClassVar[KillOrigin]
    KILL_ORIGIN_DISCONNECT: _ClassVar[KillOrigin]
    KILL_ORIGIN_DEADLINE: _ClassVar[KillOrigin]
    KILL_ORIGIN_SEND_INPUT: _ClassVar[KillOrigin]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_PROCESS_NOT_FOUND: ErrorReason
ERROR_REASON_PROCESS_ALREADY_EXISTS: ErrorReason
ERROR_REASON_LIMIT_EXCEEDED: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_CWD_OUTSIDE_WORKSPACE: ErrorReason
ERROR_REASON_SUDO_NOT_ALLOWED: ErrorReason
ERROR_REASON_PROCESS_NOT_RUNNING: ErrorReason
ERROR_REASON_STDIN_NOT_OPEN: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_SHUTTING_DOWN: ErrorReason
ERROR_REASON_SPAWN_FAILED: ErrorReason
ERROR_REASON_CWD_NOT_FOUND: ErrorReason
ERROR_REASON_CWD_NOT_ACCESSIBLE: ErrorReason
ERROR_REASON_PTY_NOT_OPEN: ErrorReason
ERROR_REASON_OFFSET_OUT_OF_RANGE: ErrorReason
ERROR_REASON_HOST_NOT_ALLOWED: ErrorReason
ERROR_REASON_STATE_NOT_RECORDED: ErrorReason
ERROR_REASON_CANCELED: ErrorReason
ERROR_REASON_SERVICE_NOT_FOUND: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
ERROR_REASON_DEADLINE_EXCEEDED: ErrorReason
ERROR_REASON_PROTOCOL_ERROR: ErrorReason
ERROR_REASON_PATH_NOT_FOUND: ErrorReason
ERROR_REASON_PATH_ALREADY_EXISTS: ErrorReason
ERROR_REASON_PATH_OUTSIDE_WORKSPACE: ErrorReason
ERROR_REASON_PATH_NOT_ACCESSIBLE: ErrorReason
ERROR_REASON_IS_A_DIRECTORY: ErrorReason
ERROR_REASON_NOT_A_DIRECTORY: ErrorReason
ERROR_REASON_DIRECTORY_NOT_EMPTY: ErrorReason
ERROR_REASON_NOT_A_REGULAR_FILE: ErrorReason
ERROR_REASON_STORAGE_EXHAUSTED: ErrorReason
ERROR_REASON_CONTENT_MISMATCH: ErrorReason
ERROR_REASON_CROSS_DEVICE: ErrorReason
ERROR_REASON_WORKSPACE_ROOT: ErrorReason
ERROR_REASON_READ_ONLY_FILESYSTEM: ErrorReason
ERROR_REASON_SYMLINK_LOOP: ErrorReason
ERROR_REASON_FILE_BUSY: ErrorReason
ERROR_REASON_FILE_SERVICE_UNAVAILABLE: ErrorReason
ERROR_REASON_LIMIT_ABOVE_CAP: ErrorReason
ERROR_REASON_LIMIT_NOT_ENFORCEABLE: ErrorReason
ERROR_REASON_RETENTION_ABOVE_LIMIT: ErrorReason
ERROR_REASON_WAIT_TIMED_OUT: ErrorReason
ERROR_REASON_PROCESS_EXITED: ErrorReason
ERROR_REASON_PATTERN_INVALID: ErrorReason
ERROR_REASON_PORTS_UNAVAILABLE: ErrorReason
PROCESS_STATUS_UNSPECIFIED: ProcessStatus
PROCESS_STATUS_STARTING: ProcessStatus
PROCESS_STATUS_RUNNING: ProcessStatus
PROCESS_STATUS_COMPLETED: ProcessStatus
PROCESS_STATUS_FAILED: ProcessStatus
PROCESS_STATUS_KILLED: ProcessStatus
PROCESS_STATUS_ERROR: ProcessStatus
OUTPUT_STREAM_UNSPECIFIED: OutputStream
OUTPUT_STREAM_STDOUT: OutputStream
OUTPUT_STREAM_STDERR: OutputStream
EXIT_CAUSE_UNSPECIFIED: ExitCause
EXIT_CAUSE_EXITED: ExitCause
EXIT_CAUSE_SIGNALED: ExitCause
EXIT_CAUSE_KILLED_ON_REQUEST: ExitCause
EXIT_CAUSE_TIMED_OUT: ExitCause
EXIT_CAUSE_OUT_OF_MEMORY: ExitCause
EXIT_CAUSE_DAEMON_SHUTDOWN: ExitCause
EXIT_CAUSE_START_FAILED: ExitCause
EXIT_CAUSE_UNKNOWN: ExitCause
START_STAGE_UNSPECIFIED: StartStage
START_STAGE_CWD: StartStage
START_STAGE_USER: StartStage
START_STAGE_EXEC: StartStage
START_STAGE_CGROUP: StartStage
START_STAGE_LIMITS: StartStage
START_STAGE_SPAWN: StartStage
START_STAGE_STATE: StartStage
KILL_ORIGIN_UNSPECIFIED: KillOrigin
KILL_ORIGIN_KILL_PROCESS: KillOrigin
KILL_ORIGIN_KILL_ALL: KillOrigin
KILL_ORIGIN_CANCEL: KillOrigin
KILL_ORIGIN_DISCONNECT: KillOrigin
KILL_ORIGIN_DEADLINE: KillOrigin
KILL_ORIGIN_SEND_INPUT: KillOrigin

class PtyOptions(_message.Message):
    __slots__ = ("cols", "rows", "term")
    COLS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    cols: int
    rows: int
    term: str
    def __init__(self, cols: _Optional[int] = ..., rows: _Optional[int] = ..., term: _Optional[str] = ...) -> None: ...

class ProcessSpec(_message.Message):
    __slots__ = ("command", "args", "env", "cwd", "timeout_ms", "process_id", "session_id", "pty", "stdin", "stdin_data", "auto_cleanup", "sudo", "limits", "retention")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    STDIN_DATA_FIELD_NUMBER: _ClassVar[int]
    AUTO_CLEANUP_FIELD_NUMBER: _ClassVar[int]
    SUDO_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    command: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cwd: str
    timeout_ms: int
    process_id: str
    session_id: str
    pty: PtyOptions
    stdin: bool
    stdin_data: bytes
    auto_cleanup: bool
    sudo: bool
    limits: ResourceLimits
    retention: OutputRetention
    def __init__(self, command: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., process_id: _Optional[str] = ..., session_id: _Optional[str] = ..., pty: _Optional[_Union[PtyOptions, _Mapping]] = ..., stdin: _Optional[bool] = ..., stdin_data: _Optional[bytes] = ..., auto_cleanup: _Optional[bool] = ..., sudo: _Optional[bool] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., retention: _Optional[_Union[OutputRetention, _Mapping]] = ...) -> None: ...

class OutputRetention(_message.Message):
    __slots__ = ("head_bytes", "tail_bytes")
    HEAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAIL_BYTES_FIELD_NUMBER: _ClassVar[int]
    head_bytes: int
    tail_bytes: int
    def __init__(self, head_bytes: _Optional[int] = ..., tail_bytes: _Optional[int] = ...) -> None: ...

class ResourceLimits(_message.Message):
    __slots__ = ("memory_bytes", "cpu_millis", "cpu_weight", "max_tasks")
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    CPU_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    memory_bytes: int
    cpu_millis: int
    cpu_weight: int
    max_tasks: int
    def __init__(self, memory_bytes: _Optional[int] = ..., cpu_millis: _Optional[int] = ..., cpu_weight: _Optional[int] = ..., max_tasks: _Optional[int] = ...) -> None: ...

class ResourceUsage(_message.Message):
    __slots__ = ("cpu_user_us", "cpu_system_us", "memory_peak_bytes", "memory_current_bytes", "io_read_bytes", "io_write_bytes", "oom_kills")
    CPU_USER_US_FIELD_NUMBER: _ClassVar[int]
    CPU_SYSTEM_US_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CURRENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    IO_READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    IO_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLS_FIELD_NUMBER: _ClassVar[int]
    cpu_user_us: int
    cpu_system_us: int
    memory_peak_bytes: int
    memory_current_bytes: int
    io_read_bytes: int
    io_write_bytes: int
    oom_kills: int
    def __init__(self, cpu_user_us: _Optional[int] = ..., cpu_system_us: _Optional[int] = ..., memory_peak_bytes: _Optional[int] = ..., memory_current_bytes: _Optional[int] = ..., io_read_bytes: _Optional[int] = ..., io_write_bytes: _Optional[int] = ..., oom_kills: _Optional[int] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: ProcessSpec
    def __init__(self, spec: _Optional[_Union[ProcessSpec, _Mapping]] = ...) -> None: ...

class ExecResponse(_message.Message):
    __slots__ = ("started", "output", "exited")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    started: ProcessInfo
    output: OutputChunk
    exited: ProcessExited
    def __init__(self, started: _Optional[_Union[ProcessInfo, _Mapping]] = ..., output: _Optional[_Union[OutputChunk, _Mapping]] = ..., exited: _Optional[_Union[ProcessExited, _Mapping]] = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ("stream", "offset", "data")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    stream: OutputStream
    offset: int
    data: bytes
    def __init__(self, stream: _Optional[_Union[OutputStream, str]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class OutputGap(_message.Message):
    __slots__ = ("stream", "offset", "missed_bytes")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MISSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    stream: OutputStream
    offset: int
    missed_bytes: int
    def __init__(self, stream: _Optional[_Union[OutputStream, str]] = ..., offset: _Optional[int] = ..., missed_bytes: _Optional[int] = ...) -> None: ...

class ProcessExited(_message.Message):
    __slots__ = ("status", "exit_code", "signal", "timed_out", "killed", "start_time", "end_time", "duration", "stdout_bytes", "stderr_bytes", "error", "cause", "cause_detail", "usage", "dropped")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    KILLED_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_DETAIL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    status: ProcessStatus
    exit_code: int
    signal: str
    timed_out: bool
    killed: bool
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    stdout_bytes: int
    stderr_bytes: int
    error: str
    cause: ExitCause
    cause_detail: ExitCauseDetail
    usage: ResourceUsage
    dropped: _containers.RepeatedCompositeFieldContainer[OutputGap]
    def __init__(self, status: _Optional[_Union[ProcessStatus, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[str] = ..., timed_out: _Optional[bool] = ..., killed: _Optional[bool] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., error: _Optional[str] = ..., cause: _Optional[_Union[ExitCause, str]] = ..., cause_detail: _Optional[_Union[ExitCauseDetail, _Mapping]] = ..., usage: _Optional[_Union[ResourceUsage, _Mapping]] = ..., dropped: _Optional[_Iterable[_Union[OutputGap, _Mapping]]] = ...) -> None: ...

class ExitCauseDetail(_message.Message):
    __slots__ = ("start_stage", "errno", "kill_origin")
    START_STAGE_FIELD_NUMBER: _ClassVar[int]
    ERRNO_FIELD_NUMBER: _ClassVar[int]
    KILL_ORIGIN_FIELD_NUMBER: _ClassVar[int]
    start_stage: StartStage
    errno: str
    kill_origin: KillOrigin
    def __init__(self, start_stage: _Optional[_Union[StartStage, str]] = ..., errno: _Optional[str] = ..., kill_origin: _Optional[_Union[KillOrigin, str]] = ...) -> None: ...

class ProcessInfo(_message.Message):
    __slots__ = ("process_id", "pid", "command", "args", "status", "session_id", "cwd", "pty", "stdin", "start_time", "exit", "stdout_bytes", "stderr_bytes", "auto_cleanup", "usage", "retention")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    AUTO_CLEANUP_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    pid: int
    command: str
    args: _containers.RepeatedScalarFieldContainer[str]
    status: ProcessStatus
    session_id: str
    cwd: str
    pty: bool
    stdin: bool
    start_time: _timestamp_pb2.Timestamp
    exit: ProcessExited
    stdout_bytes: int
    stderr_bytes: int
    auto_cleanup: bool
    usage: ResourceUsage
    retention: OutputRetention
    def __init__(self, process_id: _Optional[str] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., status: _Optional[_Union[ProcessStatus, str]] = ..., session_id: _Optional[str] = ..., cwd: _Optional[str] = ..., pty: _Optional[bool] = ..., stdin: _Optional[bool] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., exit: _Optional[_Union[ProcessExited, _Mapping]] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., auto_cleanup: _Optional[bool] = ..., usage: _Optional[_Union[ResourceUsage, _Mapping]] = ..., retention: _Optional[_Union[OutputRetention, _Mapping]] = ...) -> None: ...

class StartProcessRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: ProcessSpec
    def __init__(self, spec: _Optional[_Union[ProcessSpec, _Mapping]] = ...) -> None: ...

class StartProcessResponse(_message.Message):
    __slots__ = ("process",)
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    process: ProcessInfo
    def __init__(self, process: _Optional[_Union[ProcessInfo, _Mapping]] = ...) -> None: ...

class StreamLogsRequest(_message.Message):
    __slots__ = ("process_id", "stdout_offset", "stderr_offset", "follow")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    stdout_offset: int
    stderr_offset: int
    follow: bool
    def __init__(self, process_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class StreamLogsResponse(_message.Message):
    __slots__ = ("process", "output", "gap", "exited", "caught_up")
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    GAP_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    process: ProcessInfo
    output: OutputChunk
    gap: OutputGap
    exited: ProcessExited
    caught_up: CaughtUp
    def __init__(self, process: _Optional[_Union[ProcessInfo, _Mapping]] = ..., output: _Optional[_Union[OutputChunk, _Mapping]] = ..., gap: _Optional[_Union[OutputGap, _Mapping]] = ..., exited: _Optional[_Union[ProcessExited, _Mapping]] = ..., caught_up: _Optional[_Union[CaughtUp, _Mapping]] = ...) -> None: ...

class CaughtUp(_message.Message):
    __slots__ = ("stdout_offset", "stderr_offset")
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    stdout_offset: int
    stderr_offset: int
    def __init__(self, stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ...) -> None: ...

class SendInputRequest(_message.Message):
    __slots__ = ("open", "data", "close", "resize", "signal")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    open: OpenInput
    data: bytes
    close: CloseInput
    resize: PtyOptions
    signal: str
    def __init__(self, open: _Optional[_Union[OpenInput, _Mapping]] = ..., data: _Optional[bytes] = ..., close: _Optional[_Union[CloseInput, _Mapping]] = ..., resize: _Optional[_Union[PtyOptions, _Mapping]] = ..., signal: _Optional[str] = ...) -> None: ...

class OpenInput(_message.Message):
    __slots__ = ("process_id",)
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    def __init__(self, process_id: _Optional[str] = ...) -> None: ...

class CloseInput(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SendInputResponse(_message.Message):
    __slots__ = ("bytes_written", "closed")
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    bytes_written: int
    closed: bool
    def __init__(self, bytes_written: _Optional[int] = ..., closed: _Optional[bool] = ...) -> None: ...

class GetProcessRequest(_message.Message):
    __slots__ = ("process_id",)
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    def __init__(self, process_id: _Optional[str] = ...) -> None: ...

class GetProcessResponse(_message.Message):
    __slots__ = ("process",)
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    process: ProcessInfo
    def __init__(self, process: _Optional[_Union[ProcessInfo, _Mapping]] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ("session_id", "statuses", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    statuses: _containers.RepeatedScalarFieldContainer[ProcessStatus]
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[ProcessStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListProcessesResponse(_message.Message):
    __slots__ = ("processes", "next_page_token")
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[ProcessInfo]
    next_page_token: str
    def __init__(self, processes: _Optional[_Iterable[_Union[ProcessInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class KillProcessRequest(_message.Message):
    __slots__ = ("process_id", "signal", "grace_period_ms")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    signal: str
    grace_period_ms: int
    def __init__(self, process_id: _Optional[str] = ..., signal: _Optional[str] = ..., grace_period_ms: _Optional[int] = ...) -> None: ...

class KillProcessResponse(_message.Message):
    __slots__ = ("process",)
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    process: ProcessInfo
    def __init__(self, process: _Optional[_Union[ProcessInfo, _Mapping]] = ...) -> None: ...

class KillAllProcessesRequest(_message.Message):
    __slots__ = ("session_id", "signal", "grace_period_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    signal: str
    grace_period_ms: int
    def __init__(self, session_id: _Optional[str] = ..., signal: _Optional[str] = ..., grace_period_ms: _Optional[int] = ...) -> None: ...

class KillAllProcessesResponse(_message.Message):
    __slots__ = ("killed_count",)
    KILLED_COUNT_FIELD_NUMBER: _ClassVar[int]
    killed_count: int
    def __init__(self, killed_count: _Optional[int] = ...) -> None: ...

class CleanupProcessesRequest(_message.Message):
    __slots__ = ("session_id", "process_ids")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_IDS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    process_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., process_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CleanupProcessesResponse(_message.Message):
    __slots__ = ("removed_count",)
    REMOVED_COUNT_FIELD_NUMBER: _ClassVar[int]
    removed_count: int
    def __init__(self, removed_count: _Optional[int] = ...) -> None: ...

class GetProcessLogsRequest(_message.Message):
    __slots__ = ("process_id",)
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    def __init__(self, process_id: _Optional[str] = ...) -> None: ...

class GetProcessLogsResponse(_message.Message):
    __slots__ = ("process_id", "stdout", "stderr", "stdout_offset", "stderr_offset", "process", "head")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    stdout: bytes
    stderr: bytes
    stdout_offset: int
    stderr_offset: int
    process: ProcessInfo
    head: RetainedHead
    def __init__(self, process_id: _Optional[str] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., process: _Optional[_Union[ProcessInfo, _Mapping]] = ..., head: _Optional[_Union[RetainedHead, _Mapping]] = ...) -> None: ...

class RetainedHead(_message.Message):
    __slots__ = ("stdout", "stderr", "dropped")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    dropped: _containers.RepeatedCompositeFieldContainer[OutputGap]
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., dropped: _Optional[_Iterable[_Union[OutputGap, _Mapping]]] = ...) -> None: ...

class HttpProbe(_message.Message):
    __slots__ = ("path", "min_status", "max_status")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MIN_STATUS_FIELD_NUMBER: _ClassVar[int]
    MAX_STATUS_FIELD_NUMBER: _ClassVar[int]
    path: str
    min_status: int
    max_status: int
    def __init__(self, path: _Optional[str] = ..., min_status: _Optional[int] = ..., max_status: _Optional[int] = ...) -> None: ...

class WaitForPortRequest(_message.Message):
    __slots__ = ("port", "host", "http", "process_id", "timeout_ms", "interval_ms")
    PORT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    port: int
    host: str
    http: HttpProbe
    process_id: str
    timeout_ms: int
    interval_ms: int
    def __init__(self, port: _Optional[int] = ..., host: _Optional[str] = ..., http: _Optional[_Union[HttpProbe, _Mapping]] = ..., process_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., interval_ms: _Optional[int] = ...) -> None: ...

class WaitForPortResponse(_message.Message):
    __slots__ = ("address", "http_status", "attempts", "waited")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    address: str
    http_status: int
    attempts: int
    waited: _duration_pb2.Duration
    def __init__(self, address: _Optional[str] = ..., http_status: _Optional[int] = ..., attempts: _Optional[int] = ..., waited: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WaitForLogRequest(_message.Message):
    __slots__ = ("process_id", "pattern", "stream", "stdout_offset", "stderr_offset", "timeout_ms")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    pattern: str
    stream: OutputStream
    stdout_offset: int
    stderr_offset: int
    timeout_ms: int
    def __init__(self, process_id: _Optional[str] = ..., pattern: _Optional[str] = ..., stream: _Optional[_Union[OutputStream, str]] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class MatchGroup(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class WaitForLogResponse(_message.Message):
    __slots__ = ("stream", "offset", "line", "line_offset", "match", "groups", "named_groups")
    class NamedGroupsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STREAM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    LINE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    NAMED_GROUPS_FIELD_NUMBER: _ClassVar[int]
    stream: OutputStream
    offset: int
    line: str
    line_offset: int
    match: str
    groups: _containers.RepeatedCompositeFieldContainer[MatchGroup]
    named_groups: _containers.ScalarMap[str, str]
    def __init__(self, stream: _Optional[_Union[OutputStream, str]] = ..., offset: _Optional[int] = ..., line: _Optional[str] = ..., line_offset: _Optional[int] = ..., match: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[MatchGroup, _Mapping]]] = ..., named_groups: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WaitForExitRequest(_message.Message):
    __slots__ = ("process_id", "timeout_ms")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    timeout_ms: int
    def __init__(self, process_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class WaitForExitResponse(_message.Message):
    __slots__ = ("exited", "process")
    EXITED_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    exited: ProcessExited
    process: ProcessInfo
    def __init__(self, exited: _Optional[_Union[ProcessExited, _Mapping]] = ..., process: _Optional[_Union[ProcessInfo, _Mapping]] = ...) -> None: ...

class ListPortsRequest(_message.Message):
    __slots__ = ("process_id",)
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    def __init__(self, process_id: _Optional[str] = ...) -> None: ...

class ListPortsResponse(_message.Message):
    __slots__ = ("ports",)
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ports: _containers.RepeatedCompositeFieldContainer[ListeningPort]
    def __init__(self, ports: _Optional[_Iterable[_Union[ListeningPort, _Mapping]]] = ...) -> None: ...

class ListeningPort(_message.Message):
    __slots__ = ("port", "address", "ipv6", "pid", "program", "process_id")
    PORT_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    IPV6_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    port: int
    address: str
    ipv6: bool
    pid: int
    program: str
    process_id: str
    def __init__(self, port: _Optional[int] = ..., address: _Optional[str] = ..., ipv6: _Optional[bool] = ..., pid: _Optional[int] = ..., program: _Optional[str] = ..., process_id: _Optional[str] = ...) -> None: ...
