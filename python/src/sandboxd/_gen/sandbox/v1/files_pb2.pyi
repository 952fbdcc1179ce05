import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_TYPE_UNSPECIFIED: _ClassVar[FileType]
    FILE_TYPE_FILE: _ClassVar[FileType]
    FILE_TYPE_DIRECTORY: _ClassVar[FileType]
    FILE_TYPE_SYMLINK: _ClassVar[FileType]
    FILE_TYPE_FIFO: _ClassVar[FileType]
    FILE_TYPE_SOCKET: _ClassVar[FileType]
    FILE_TYPE_CHARACTER_DEVICE: _ClassVar[FileType]
    FILE_TYPE_BLOCK_DEVICE: _ClassVar[FileType]

class ReadLimit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_LIMIT_UNSPECIFIED: _ClassVar[ReadLimit]
    READ_LIMIT_LENGTH: _ClassVar[ReadLimit]
    READ_LIMIT_SIZE_AT_OPEN: _ClassVar[ReadLimit]
    READ_LIMIT_MAX_UNSIZED_READ_BYTES: _ClassVar[ReadLimit]

class FileChangeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_CHANGE_TYPE_UNSPECIFIED: _ClassVar[FileChangeType]
    FILE_CHANGE_TYPE_CREATE: _ClassVar[FileChangeType]
    FILE_CHANGE_TYPE_WRITE: _ClassVar[FileChangeType]
    FILE_CHANGE_TYPE_REMOVE: _ClassVar[FileChangeType]
    FILE_CHANGE_TYPE_RENAME: _ClassVar[FileChangeType]
    FILE_CHANGE_TYPE_ATTRIBUTE: _ClassVar[FileChangeType]

class WatchOverflowSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WATCH_OVERFLOW_SOURCE_UNSPECIFIED: _ClassVar[WatchOverflowSource]
    WATCH_OVERFLOW_SOURCE_KERNEL: _ClassVar[WatchOverflowSource]
    WATCH_OVERFLOW_SOURCE_CLIENT: _ClassVar[WatchOverflowSource]
    WATCH_OVERFLOW_SOURCE_WATCH_LIMIT: _ClassVar[WatchOverflowSource]

class WatchEndReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WATCH_END_REASON_UNSPECIFIED: _ClassVar[WatchEndReason]
    WATCH_END_REASON_DIRECTORY_REMOVED: _ClassVar[WatchEndReason]
    WATCH_END_REASON_DIRECTORY_MOVED: _ClassVar[WatchEndReason]
    WATCH_END_REASON_UNMOUNTED: _ClassVar[WatchEndReason]
FILE_TYPE_UNSPECIFIED: FileType
FILE_TYPE_FILE: FileType
FILE_TYPE_DIRECTORY: FileType
FILE_TYPE_SYMLINK: FileType
FILE_TYPE_FIFO: FileType
FILE_TYPE_SOCKET: FileType
FILE_TYPE_CHARACTER_DEVICE: FileType
FILE_TYPE_BLOCK_DEVICE: FileType
READ_LIMIT_UNSPECIFIED: ReadLimit
READ_LIMIT_LENGTH: ReadLimit
READ_LIMIT_SIZE_AT_OPEN: ReadLimit
READ_LIMIT_MAX_UNSIZED_READ_BYTES: ReadLimit
FILE_CHANGE_TYPE_UNSPECIFIED: FileChangeType
FILE_CHANGE_TYPE_CREATE: FileChangeType
FILE_CHANGE_TYPE_WRITE: FileChangeType
FILE_CHANGE_TYPE_REMOVE: FileChangeType
FILE_CHANGE_TYPE_RENAME: FileChangeType
FILE_CHANGE_TYPE_ATTRIBUTE: FileChangeType
WATCH_OVERFLOW_SOURCE_UNSPECIFIED: WatchOverflowSource
WATCH_OVERFLOW_SOURCE_KERNEL: WatchOverflowSource
WATCH_OVERFLOW_SOURCE_CLIENT: WatchOverflowSource
WATCH_OVERFLOW_SOURCE_WATCH_LIMIT: WatchOverflowSource
WATCH_END_REASON_UNSPECIFIED: WatchEndReason
WATCH_END_REASON_DIRECTORY_REMOVED: WatchEndReason
WATCH_END_REASON_DIRECTORY_MOVED: WatchEndReason
WATCH_END_REASON_UNMOUNTED: WatchEndReason

class FileInfo(_message.Message):
    __slots__ = ("path", "name", "type", "size_bytes", "mode", "uid", "gid", "owner", "group", "modified_time", "symlink_target")
    PATH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_TIME_FIELD_NUMBER: _ClassVar[int]
    SYMLINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    path: str
    name: str
    type: FileType
    size_bytes: int
    mode: int
    uid: int
    gid: int
    owner: str
    group: str
    modified_time: _timestamp_pb2.Timestamp
    symlink_target: str
    def __init__(self, path: _Optional[str] = ..., name: _Optional[str] = ..., type: _Optional[_Union[FileType, str]] = ..., size_bytes: _Optional[int] = ..., mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., modified_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., symlink_target: _Optional[str] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("path", "offset", "length")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    path: str
    offset: int
    length: int
    def __init__(self, path: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("stat", "chunk", "limit_reached", "end")
    STAT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    LIMIT_REACHED_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    stat: FileInfo
    chunk: FileChunk
    limit_reached: ReadLimitReached
    end: ReadEnd
    def __init__(self, stat: _Optional[_Union[FileInfo, _Mapping]] = ..., chunk: _Optional[_Union[FileChunk, _Mapping]] = ..., limit_reached: _Optional[_Union[ReadLimitReached, _Mapping]] = ..., end: _Optional[_Union[ReadEnd, _Mapping]] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("offset", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class ReadLimitReached(_message.Message):
    __slots__ = ("limit", "limit_bytes")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    limit: ReadLimit
    limit_bytes: int
    def __init__(self, limit: _Optional[_Union[ReadLimit, str]] = ..., limit_bytes: _Optional[int] = ...) -> None: ...

class ReadEnd(_message.Message):
    __slots__ = ("bytes_read", "end_offset", "eof")
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    bytes_read: int
    end_offset: int
    eof: bool
    def __init__(self, bytes_read: _Optional[int] = ..., end_offset: _Optional[int] = ..., eof: _Optional[bool] = ...) -> None: ...

class WriteRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: WriteHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[WriteHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class WriteHeader(_message.Message):
    __slots__ = ("path", "mode", "create_parents", "fail_if_exists", "expected_size_bytes", "expected_sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    FAIL_IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    mode: int
    create_parents: bool
    fail_if_exists: bool
    expected_size_bytes: int
    expected_sha256: str
    def __init__(self, path: _Optional[str] = ..., mode: _Optional[int] = ..., create_parents: _Optional[bool] = ..., fail_if_exists: _Optional[bool] = ..., expected_size_bytes: _Optional[int] = ..., expected_sha256: _Optional[str] = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ("stat",)
    STAT_FIELD_NUMBER: _ClassVar[int]
    stat: FileInfo
    def __init__(self, stat: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class StatRequest(_message.Message):
    __slots__ = ("path", "follow_symlinks")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    path: str
    follow_symlinks: bool
    def __init__(self, path: _Optional[str] = ..., follow_symlinks: _Optional[bool] = ...) -> None: ...

class StatResponse(_message.Message):
    __slots__ = ("stat",)
    STAT_FIELD_NUMBER: _ClassVar[int]
    stat: FileInfo
    def __init__(self, stat: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("path", "depth", "page_size", "page_token")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    path: str
    depth: int
    page_size: int
    page_token: str
    def __init__(self, path: _Optional[str] = ..., depth: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[FileInfo]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[FileInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class MakeDirRequest(_message.Message):
    __slots__ = ("path", "parents", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    parents: bool
    mode: int
    def __init__(self, path: _Optional[str] = ..., parents: _Optional[bool] = ..., mode: _Optional[int] = ...) -> None: ...

class MakeDirResponse(_message.Message):
    __slots__ = ("stat", "created")
    STAT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    stat: FileInfo
    created: bool
    def __init__(self, stat: _Optional[_Union[FileInfo, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class RemoveRequest(_message.Message):
    __slots__ = ("path", "recursive")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    def __init__(self, path: _Optional[str] = ..., recursive: _Optional[bool] = ...) -> None: ...

class RemoveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MoveRequest(_message.Message):
    __slots__ = ("source", "destination", "overwrite")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    source: str
    destination: str
    overwrite: bool
    def __init__(self, source: _Optional[str] = ..., destination: _Optional[str] = ..., overwrite: _Optional[bool] = ...) -> None: ...

class MoveResponse(_message.Message):
    __slots__ = ("stat",)
    STAT_FIELD_NUMBER: _ClassVar[int]
    stat: FileInfo
    def __init__(self, stat: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class ChmodRequest(_message.Message):
    __slots__ = ("path", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    mode: int
    def __init__(self, path: _Optional[str] = ..., mode: _Optional[int] = ...) -> None: ...

class ChmodResponse(_message.Message):
    __slots__ = ("stat",)
    STAT_FIELD_NUMBER: _ClassVar[int]
    stat: FileInfo
    def __init__(self, stat: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("path", "recursive")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    def __init__(self, path: _Optional[str] = ..., recursive: _Optional[bool] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("started", "change", "overflow", "ended")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    OVERFLOW_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    started: WatchStarted
    change: FileChange
    overflow: WatchOverflow
    ended: WatchEnded
    def __init__(self, started: _Optional[_Union[WatchStarted, _Mapping]] = ..., change: _Optional[_Union[FileChange, _Mapping]] = ..., overflow: _Optional[_Union[WatchOverflow, _Mapping]] = ..., ended: _Optional[_Union[WatchEnded, _Mapping]] = ...) -> None: ...

class WatchStarted(_message.Message):
    __slots__ = ("stat", "watched_directories")
    STAT_FIELD_NUMBER: _ClassVar[int]
    WATCHED_DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    stat: FileInfo
    watched_directories: int
    def __init__(self, stat: _Optional[_Union[FileInfo, _Mapping]] = ..., watched_directories: _Optional[int] = ...) -> None: ...

class FileChange(_message.Message):
    __slots__ = ("type", "path", "old_path", "is_directory")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OLD_PATH_FIELD_NUMBER: _ClassVar[int]
    IS_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    type: FileChangeType
    path: str
    old_path: str
    is_directory: bool
    def __init__(self, type: _Optional[_Union[FileChangeType, str]] = ..., path: _Optional[str] = ..., old_path: _Optional[str] = ..., is_directory: _Optional[bool] = ...) -> None: ...

class WatchOverflow(_message.Message):
    __slots__ = ("source", "lost_events", "path")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LOST_EVENTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    source: WatchOverflowSource
    lost_events: int
    path: str
    def __init__(self, source: _Optional[_Union[WatchOverflowSource, str]] = ..., lost_events: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class WatchEnded(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: WatchEndReason
    def __init__(self, reason: _Optional[_Union[WatchEndReason, str]] = ...) -> None: ...
