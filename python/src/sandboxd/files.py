"""What the file service describes: a directory entry (:class:`FileInfo`) and the events of a watch."""

from __future__ import annotations

import datetime
import stat as stats
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from ._gen.sandbox.v1 import files_pb2 as pb


def _kebab(name: str, prefix: str) -> str:
    """A generated enum value's name without its prefix, lower-case and kebab-cased: ``character-device``."""
    return name.removeprefix(prefix).lower().replace("_", "-")


class FileType(StrEnum):
    """FileType is what a directory entry is (sandbox.proto's ``FileType``, kebab-cased)."""

    #: A regular file.
    FILE = "file"
    #: A directory.
    DIRECTORY = "directory"
    #: A symbolic link (described, never followed: see ``symlink_target``).
    SYMLINK = "symlink"
    #: A named pipe.
    FIFO = "fifo"
    #: A Unix domain socket.
    SOCKET = "socket"
    #: A character device.
    CHARACTER_DEVICE = "character-device"
    #: A block device.
    BLOCK_DEVICE = "block-device"

    @classmethod
    def from_proto(cls, value: int) -> FileType:
        """The type of a protobuf value, by the generated enum's name."""
        return cls(_kebab(pb.FileType.Name(value), "FILE_TYPE_"))


@dataclass(frozen=True, slots=True)
class FileInfo:
    """FileInfo describes one directory entry as lstat(2) sees it, as E2B's ``EntryInfo``: sizes in bytes, times as
    aware datetimes (UTC)."""

    #: Absolute path of the entry on the daemon's machine.
    path: str
    #: The last component of ``path``.
    name: str
    #: What kind of entry it is.
    type: FileType
    #: Size in bytes (for a symlink, the length of its target).
    size: int
    #: Permission bits with setuid, setgid and sticky: ``0o644`` is 420.
    mode: int
    #: Owner's user id.
    uid: int
    #: Owner's group id.
    gid: int
    #: Owner's user name; empty when the uid has no name there.
    owner: str
    #: Owner's group name; empty when the gid has no name there.
    group: str
    #: Last modification of the content.
    modified_time: datetime.datetime
    #: For a symlink, what it points to, as written in the link.
    symlink_target: str | None = None

    @property
    def permissions(self) -> str:
        """The mode as ``ls -l`` writes it after the type letter, such as ``rw-r--r--``."""
        return stats.filemode(stats.S_IFREG | self.mode)[1:]

    @property
    def is_dir(self) -> bool:
        """Whether the entry is a directory."""
        return self.type == FileType.DIRECTORY

    @property
    def is_file(self) -> bool:
        """Whether the entry is a regular file."""
        return self.type == FileType.FILE

    @classmethod
    def from_proto(cls, info: pb.FileInfo) -> FileInfo:
        """Converts the daemon's message."""
        return cls(
            path=info.path,
            name=info.name,
            type=FileType.from_proto(info.type),
            size=info.size_bytes,
            mode=info.mode,
            uid=info.uid,
            gid=info.gid,
            owner=info.owner,
            group=info.group,
            modified_time=info.modified_time.ToDatetime(tzinfo=datetime.UTC),
            symlink_target=info.symlink_target if info.HasField("symlink_target") else None,
        )


#: What happened to an entry under a watch: sandbox.proto's ``FileChangeType``, kebab-cased.
FileChangeType = Literal["create", "write", "remove", "rename", "attribute"]

#: Where a watch lost changes: sandbox.proto's ``WatchOverflowSource``, kebab-cased, or ``reconnect``: the connection
#: broke and the watch was set up again on a new one.
OverflowSource = Literal["kernel", "client", "watch-limit", "reconnect"]

#: Why a watch ended by itself: sandbox.proto's ``WatchEndReason``, kebab-cased.
WatchEndReason = Literal["directory-removed", "directory-moved", "unmounted"]


@dataclass(frozen=True, slots=True)
class FileChange:
    """FileChange is one change seen by a watch."""

    #: What happened: create, write, remove, rename or attribute.
    type: FileChangeType
    #: Absolute path of the entry (its new path for a rename; empty for a move out of the watch).
    path: str
    #: Whether the entry is a directory.
    is_directory: bool
    #: For a rename, the entry's path before it (None for a move in from outside the watch).
    old_path: str | None = None


@dataclass(frozen=True, slots=True)
class WatchOverflow:
    """WatchOverflow says changes were lost: the kernel's queue overflowed (``kernel``), this client read more slowly
    than changes happened (``client``), a new subdirectory could not be watched (``watch-limit``, ``path`` says
    which), or the connection broke and the watch was set up again (``reconnect``). A client keeping a copy in sync
    should list the directory again."""

    #: Where the changes were lost.
    source: OverflowSource
    #: How many changes the daemon dropped, when it knows (0 for the kernel's).
    lost_events: int
    #: For ``watch-limit``, the directory left unwatched.
    path: str | None = None
    #: Always ``overflow``, to tell it from a :class:`FileChange` by ``event.type``.
    type: Literal["overflow"] = "overflow"


#: What a watch yields.
WatchEvent = FileChange | WatchOverflow


def change_from_proto(change: pb.FileChange) -> FileChange:
    """Converts the daemon's change."""
    kind = _kebab(pb.FileChangeType.Name(change.type), "FILE_CHANGE_TYPE_")
    return FileChange(type=kind, path=change.path, is_directory=change.is_directory, old_path=change.old_path or None)  # type: ignore[arg-type]


def overflow_from_proto(overflow: pb.WatchOverflow) -> WatchOverflow:
    """Converts the daemon's overflow."""
    source = _kebab(pb.WatchOverflowSource.Name(overflow.source), "WATCH_OVERFLOW_SOURCE_")
    return WatchOverflow(source=source, lost_events=overflow.lost_events, path=overflow.path or None)  # type: ignore[arg-type]


def end_reason_from_proto(reason: int) -> WatchEndReason:
    """Converts the daemon's end reason."""
    return _kebab(pb.WatchEndReason.Name(reason), "WATCH_END_REASON_")  # type: ignore[return-value]
