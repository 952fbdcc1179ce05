"""Files and FileWatch: the sync file API, thin wrappers running AsyncFiles on the sync sandbox's portal."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Self, Unpack

from ._files import (
    AsyncFiles,
    AsyncFileWatch,
    DownloadOptions,
    ListOptions,
    MkdirOptions,
    ReadOptions,
    ReadTextOptions,
    RemoveOptions,
    RenameOptions,
    StatOptions,
    WatchOptions,
    WriteData,
    WriteOptions,
)
from ._portal import Portal
from .files import FileInfo, WatchEndReason, WatchEvent
from .options import check_options


class Files:
    """Files is a sync sandbox's file API (``sandbox.files``): the same calls as :class:`~sandboxd.AsyncFiles`,
    method for method; a KeyboardInterrupt during a call cancels it on the daemon (a cancelled write leaves
    nothing behind)."""

    def __init__(self, files: Callable[[], AsyncFiles], portal: Portal) -> None:
        """Internal: a sandbox makes its own, over its asyncio sandbox's files and its portal."""
        self._files = files
        self._portal = portal

    @property
    def _async(self) -> AsyncFiles:
        return self._files()

    def read_bytes(self, path: str, **options: Unpack[ReadOptions]) -> bytes:
        """A file's bytes, or a range of them (see AsyncFiles.read_bytes)."""
        return self._portal.call(self._async.read_bytes, path, **options)

    def read_text(self, path: str, **options: Unpack[ReadTextOptions]) -> str:
        """A file's text (see AsyncFiles.read_text)."""
        return self._portal.call(self._async.read_text, path, **options)

    def read(self, path: str, **options: Unpack[ReadTextOptions]) -> str:
        """A file's text, as E2B's ``files.read(path)``."""
        return self._portal.call(self._async.read, path, **options)

    def iter(self, path: str, **options: Unpack[ReadOptions]) -> Iterator[bytes]:
        """A file's bytes as they arrive, chunk by chunk, resuming after a broken connection (see AsyncFiles.iter);
        leaving the loop cancels the read."""
        check_options(options, ReadOptions, "iter()")
        return self._portal.iterate(self._async.iter(path, **options))

    def write(self, path: str, data: WriteData, **options: Unpack[WriteOptions]) -> FileInfo:
        """Creates or replaces a file with ``data``, streamed and atomic (see AsyncFiles.write)."""
        return self._portal.call(self._async.write, path, data, **options)

    def upload_file(self, local_path: str | os.PathLike[str], remote_path: str, **options: Unpack[WriteOptions]) -> FileInfo:
        """Uploads a local file, streamed, keeping its permission bits (see AsyncFiles.upload_file)."""
        return self._portal.call(self._async.upload_file, local_path, remote_path, **options)

    def download_file(self, remote_path: str, local_path: str | os.PathLike[str], **options: Unpack[DownloadOptions]) -> FileInfo:
        """Downloads a file, streamed, renamed into place at the end (see AsyncFiles.download_file)."""
        return self._portal.call(self._async.download_file, remote_path, local_path, **options)

    def list(self, path: str = ".", **options: Unpack[ListOptions]) -> builtins.list[FileInfo]:
        """Every entry of a directory, to ``depth`` (see AsyncFiles.list)."""
        return self._portal.call(self._async.list, path, **options)

    def entries(self, path: str = ".", **options: Unpack[ListOptions]) -> Iterator[FileInfo]:
        """The entries of a directory one at a time, a page fetched when needed."""
        check_options(options, ListOptions, "entries()")
        return self._portal.iterate(self._async.entries(path, **options))

    def stat(self, path: str, **options: Unpack[StatOptions]) -> FileInfo:
        """Describes an entry (see AsyncFiles.stat)."""
        return self._portal.call(self._async.stat, path, **options)

    def get_info(self, path: str, **options: Unpack[StatOptions]) -> FileInfo:
        """The same as :meth:`stat`, under E2B's name."""
        return self._portal.call(self._async.get_info, path, **options)

    def exists(self, path: str) -> bool:
        """Whether something exists at the path."""
        return self._portal.call(self._async.exists, path)

    def mkdir(self, path: str, **options: Unpack[MkdirOptions]) -> FileInfo:
        """Creates a directory (see AsyncFiles.mkdir)."""
        return self._portal.call(self._async.mkdir, path, **options)

    def make_dir(self, path: str) -> bool:
        """Creates a directory and its parents; True when created, False when it existed (E2B's ``make_dir``)."""
        return self._portal.call(self._async.make_dir, path)

    def remove(self, path: str, **options: Unpack[RemoveOptions]) -> None:
        """Removes an entry (see AsyncFiles.remove)."""
        self._portal.call(self._async.remove, path, **options)

    def rename(self, old_path: str, new_path: str, **options: Unpack[RenameOptions]) -> FileInfo:
        """Renames an entry atomically (see AsyncFiles.rename)."""
        return self._portal.call(self._async.rename, old_path, new_path, **options)

    def chmod(self, path: str, mode: int) -> FileInfo:
        """Changes permission bits (see AsyncFiles.chmod)."""
        return self._portal.call(self._async.chmod, path, mode)

    def watch(self, path: str, **options: Unpack[WatchOptions]) -> FileWatch:
        """Watches a directory and returns once the watch is in place (see AsyncFiles.watch)."""
        return FileWatch(self._portal.call(self._async.watch, path, **options), self._portal)


class FileWatch:
    """FileWatch is a watch in place for sync code: ``for event in watch`` yields the changes after ``watch()``
    returned; ``with watch:`` or ``close()`` ends it (see :class:`~sandboxd.AsyncFileWatch`)."""

    def __init__(self, watch: AsyncFileWatch, portal: Portal) -> None:
        """Internal: made by ``Files.watch()``."""
        self._watch = watch
        self._portal = portal

    @property
    def directory(self) -> FileInfo:
        """The watched directory."""
        return self._watch.directory

    @property
    def watched_directories(self) -> int:
        """How many directories the daemon watches."""
        return self._watch.watched_directories

    @property
    def end_reason(self) -> WatchEndReason | None:
        """Why the watch ended by itself, once it did."""
        return self._watch.end_reason

    def close(self) -> None:
        """Ends the watch; a loop over it ends quietly."""
        self._portal.call(_close, self._watch)

    def __iter__(self) -> Iterator[WatchEvent]:
        return self._portal.iterate(aiter(self._watch))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()


async def _close(watch: AsyncFileWatch) -> None:
    watch.close()
