"""AsyncFiles: a sandbox's file API for asyncio (``sandbox.files``), over sandbox.v1.FileService."""

from __future__ import annotations

import asyncio
import builtins
import codecs
import contextlib
import os
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypedDict, TypeVar, Unpack

import grpc
import grpc.aio

from ._gen.sandbox.v1 import files_pb2 as pb
from ._reconnect import ReconnectPolicy, is_transient
from ._transport import FileRpc, SandboxRpc
from .errors import FileChangedError, InvalidArgumentError, PathNotFoundError, ReadLimitError, SandboxError, from_rpc_error
from .files import FileInfo, FileType, WatchEndReason, WatchEvent, WatchOverflow, change_from_proto, end_reason_from_proto, overflow_from_proto
from .options import check_options

_Response = TypeVar("_Response")

#: Largest data message a write sends: the contract's best size, well under the daemon's 4 MiB message limit.
_MAX_MESSAGE_BYTES = 1024 * 1024
#: Small pieces of a source are gathered into messages of at least this many bytes (the last one excepted).
_MIN_MESSAGE_BYTES = 64 * 1024

#: What ``write()`` takes: text (UTF-8), bytes, a local file's path (``pathlib.Path`` or any ``os.PathLike``; a ``str``
#: is text, never a path), a binary file object, or a sync or async iterable of bytes or text. Files, file objects and
#: iterables are sent as they are read, never gathered first.
WriteData = str | bytes | bytearray | memoryview | os.PathLike[str] | IO[bytes] | Iterable[bytes | str] | AsyncIterable[bytes | str]


class ReadOptions(TypedDict, total=False):
    """Options of ``read_bytes()``, ``read_text()`` and ``iter()``: a byte range."""

    #: Byte offset of the first byte; 0 by default. An offset past the end reads nothing.
    offset: int
    #: At most this many bytes from ``offset``; to the end of the file by default.
    length: int


class ReadTextOptions(ReadOptions, total=False):
    """Options of ``read_text()``: a range and how to decode it."""

    #: Encoding; UTF-8 by default.
    encoding: str
    #: How decoding errors are handled, as ``bytes.decode``'s ``errors``; ``strict`` by default.
    errors: str


class WriteOptions(TypedDict, total=False):
    """Options of ``write()`` and ``upload_file()``."""

    #: Permission bits (``0o644``), applied exactly (no umask). By default an existing file keeps its mode and a new
    #: one gets 0o644 (``upload_file``: the local file's).
    mode: int
    #: Create missing parent directories (0755), as E2B's write does. True by default.
    create_parents: bool
    #: Replace what exists at the path (True by default); False makes an existing entry a PathExistsError.
    overwrite: bool
    #: The number of bytes the data must have; otherwise ContentMismatchError and nothing is written.
    expected_size: int
    #: The SHA-256 of the data, in hex; a different digest is ContentMismatchError and nothing is written.
    expected_sha256: str


class DownloadOptions(TypedDict, total=False):
    """Options of ``download_file()``."""

    #: Permission bits of the local file; the remote file's by default.
    mode: int


class StatOptions(TypedDict, total=False):
    """Options of ``stat()``."""

    #: Describe what a symlink points to (inside the workspace) instead of the link. False by default.
    follow_symlinks: bool


class ListOptions(TypedDict, total=False):
    """Options of ``list()``."""

    #: How deep to descend: 1 (the default) lists the directory's entries, 2 their entries too, up to 64.
    depth: int


class MkdirOptions(TypedDict, total=False):
    """Options of ``mkdir()``."""

    #: Create missing parents, and succeed when the directory exists (as ``mkdir -p``). False by default.
    parents: bool
    #: Permission bits of the directories created (0o755 by default), applied exactly.
    mode: int


class RemoveOptions(TypedDict, total=False):
    """Options of ``remove()``."""

    #: Remove a directory with everything in it (symlinks inside are removed, never followed). False by default.
    recursive: bool
    #: Succeed when nothing is at the path, as ``pathlib.Path.unlink(missing_ok=True)``. False by default.
    missing_ok: bool


class RenameOptions(TypedDict, total=False):
    """Options of ``rename()``."""

    #: Replace what exists at the new path (a file by a file, an empty directory by a directory). False by default.
    overwrite: bool


class WatchOptions(TypedDict, total=False):
    """Options of ``watch()``."""

    #: Watch subdirectories too, those created while watching included. False by default.
    recursive: bool


class AsyncFiles:
    """AsyncFiles is a sandbox's file API (``sandbox.files``) for asyncio: the files of the daemon's machine inside
    its workspace roots, as E2B's Python ``sandbox.files`` (``read``, ``write``, ``list``, ``exists``, ``make_dir``,
    ``remove``, ``rename``, ``watch_dir``) with pathlib's words where Python has them (``read_bytes``,
    ``read_text``, ``mkdir(parents=)``, ``missing_ok``, ``stat``, ``chmod``).

    Paths are relative to the daemon's first workspace root, or absolute inside a root. Failures are SandboxErrors
    by the daemon's reason: PathNotFoundError (a FileNotFoundError too), PathExistsError (a FileExistsError),
    PathOutsideWorkspaceError, IsDirectoryError, NotDirectoryError, DirectoryNotEmptyError, ContentMismatchError...
    Streamed calls (``iter``, ``write`` from a file or an iterable, ``upload_file``, ``download_file``) hold one chunk
    of at most 1 MiB at a time. A read whose connection breaks resumes where it left off (with the sandbox's
    reconnect policy); a write is never retried. Cancelling a call (a task cancel, Ctrl-C in the sync API) cancels
    it on the daemon: a cancelled write leaves nothing behind.
    """

    def __init__(self, rpc: Callable[[], SandboxRpc], reconnect: Callable[[], ReconnectPolicy]) -> None:
        """Internal: a sandbox makes its own (``sandbox.files``), with its connection while it runs (``rpc``, which
        raises once it is closed) and its reconnect policy."""
        self._running_rpc = rpc
        self._reconnect = reconnect

    def _rpc(self) -> tuple[FileRpc, tuple[tuple[str, str], ...]]:
        rpc = self._running_rpc()
        return rpc.files, rpc.metadata

    async def read_bytes(self, path: str, **options: Unpack[ReadOptions]) -> bytes:
        """A file's bytes (or a range of them, with ``offset`` and ``length``), as ``pathlib.Path.read_bytes``. A file
        that grows while it is read is read up to the size it had when opened; a file without a size (a device) that
        the daemon stops at its limit raises ReadLimitError: give a ``length``."""
        check_options(options, ReadOptions, "read_bytes()")
        return b"".join([chunk async for chunk in self.iter(path, **options)])

    async def read_text(self, path: str, **options: Unpack[ReadTextOptions]) -> str:
        """A file's text (UTF-8 unless ``encoding`` says otherwise), as ``pathlib.Path.read_text``."""
        check_options(options, ReadTextOptions, "read_text()")
        encoding = options.get("encoding", "utf-8")
        try:
            codecs.lookup(encoding)
        except LookupError as error:
            raise InvalidArgumentError(f"unknown encoding: {encoding}") from error
        data = await self.read_bytes(path, **_range(options))
        return data.decode(encoding, options.get("errors", "strict"))

    async def read(self, path: str, **options: Unpack[ReadTextOptions]) -> str:
        """A file's text, as E2B's ``files.read(path)``: the same as :meth:`read_text`."""
        check_options(options, ReadTextOptions, "read()")
        return await self.read_text(path, **options)

    async def iter(self, path: str, **options: Unpack[ReadOptions]) -> AsyncIterator[bytes]:
        """A file's bytes as they arrive, one chunk (at most 1 MiB) at a time, read as the loop asks; leaving the loop
        cancels the read. A regular file's read whose connection breaks resumes at the offset after the last chunk
        handed over, once the daemon confirms the file has the size and modification time it had (otherwise
        FileChangedError)."""
        check_options(options, ReadOptions, "iter()")
        offset = _non_negative(options.get("offset", 0), "offset")
        length = options.get("length")
        end = None if length is None else offset + _non_negative(length, "length")
        policy = self._reconnect()
        opened: FileInfo | None = None
        failures = 0
        while True:
            files, metadata = self._rpc()
            request = pb.ReadRequest(path=path, offset=offset)
            if end is not None:
                request.length = max(0, end - offset)
            call = files.read(request, metadata=metadata)
            unsized_limit: int | None = None
            ended = False
            try:
                async for response in call:
                    event = response.WhichOneof("event")
                    if event == "stat":
                        info = FileInfo.from_proto(response.stat)
                        if opened is None:
                            opened = info
                        elif (info.size, info.modified_time) != (opened.size, opened.modified_time):
                            raise FileChangedError(f"{path} changed while it was read, so the read cannot resume", metadata={"path": path})
                    elif event == "chunk":
                        failures = 0
                        offset = response.chunk.offset + len(response.chunk.data)
                        yield response.chunk.data
                    elif event == "limit_reached":
                        if response.limit_reached.limit == pb.READ_LIMIT_MAX_UNSIZED_READ_BYTES:
                            unsized_limit = response.limit_reached.limit_bytes
                    elif event == "end":
                        ended = True
            except grpc.aio.AioRpcError as error:
                # Only a regular file's bytes stay where they were: a device or a pipe cannot be read again.
                resumable = opened is not None and opened.type == FileType.FILE and is_transient(error)
                failures += 1
                if not resumable or failures > policy.max_attempts:
                    raise from_rpc_error(error) from error
                await asyncio.sleep(policy.delay(failures))
                continue
            finally:
                call.cancel()
            if not ended:
                raise SandboxError(f"the read of {path} ended without its end event", code="NO_END")
            if unsized_limit is not None:
                raise ReadLimitError(
                    f"the daemon stopped reading {path} at its limit of {unsized_limit} bytes for files without a size",
                    metadata={"path": path, "limit_bytes": str(unsized_limit)},
                )
            return

    async def write(self, path: str, data: WriteData, **options: Unpack[WriteOptions]) -> FileInfo:
        """Creates or replaces a file with ``data`` (see :data:`WriteData`), as E2B's ``files.write(path, data)``, and
        returns the new file's info. Streamed: a file, file object or iterable is sent as it is read, a message of 64
        KiB to 1 MiB at a time. Atomic: a reader sees the old file or the new one; cancelled or failed, nothing is left
        behind and the old file is intact. Never retried. Missing parents are created unless ``create_parents=False``.
        """
        check_options(options, WriteOptions, "write()")
        header = pb.WriteHeader(
            path=path,
            create_parents=options.get("create_parents", True),
            fail_if_exists=options.get("overwrite", True) is False,
            expected_sha256=options.get("expected_sha256", ""),
        )
        if "mode" in options:
            header.mode = _mode(options["mode"])
        if "expected_size" in options:
            header.expected_size_bytes = _non_negative(options["expected_size"], "expected_size")
        source_failure: list[BaseException] = []

        async def requests() -> AsyncIterator[pb.WriteRequest]:
            yield pb.WriteRequest(header=header)
            try:
                async for message in _messages(_byte_source(data)):
                    yield pb.WriteRequest(data=message)
            except Exception as error:
                source_failure.append(error)
                raise

        files, metadata = self._rpc()
        try:
            response = await files.write(requests(), metadata=metadata)
        except grpc.aio.AioRpcError as error:
            if source_failure:
                raise source_failure[0] from error
            raise from_rpc_error(error) from error
        return FileInfo.from_proto(response.stat)

    async def upload_file(self, local_path: str | os.PathLike[str], remote_path: str, **options: Unpack[WriteOptions]) -> FileInfo:
        """Uploads a local file to ``remote_path``, streamed; it gets the local file's permission bits unless ``mode``
        says otherwise (as Daytona's ``fs.upload_file``)."""
        check_options(options, WriteOptions, "upload_file()")
        local = Path(local_path)
        try:
            mode = local.stat().st_mode & 0o7777
        except OSError as error:
            raise InvalidArgumentError(f"cannot read {local}: {error.strerror}", metadata={"path": str(local)}) from error
        if not local.is_file():
            raise InvalidArgumentError(f"{local} is not a regular file", metadata={"path": str(local)})
        given: WriteOptions = {"mode": mode}
        given.update(options)
        return await self.write(remote_path, local, **given)

    async def download_file(self, remote_path: str, local_path: str | os.PathLike[str], **options: Unpack[DownloadOptions]) -> FileInfo:
        """Downloads ``remote_path`` to a local file, streamed (as Daytona's ``fs.download_file``): written to a
        temporary file beside it and renamed into place at the end, so a cancelled or failed download leaves nothing.
        The file gets the remote file's permission bits unless ``mode`` says otherwise. Returns the remote file's
        info."""
        check_options(options, DownloadOptions, "download_file()")
        target = Path(local_path)
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.download")
        stat: FileInfo | None = None
        try:
            with open(temporary, "wb") as out:  # noqa: ASYNC230 - each write is one chunk of at most 1 MiB
                async for chunk in self.iter(remote_path):
                    await asyncio.to_thread(out.write, chunk)
            stat = await self.stat(remote_path, follow_symlinks=True)
            os.chmod(temporary, _mode(options["mode"]) if "mode" in options else stat.mode & 0o7777)
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return stat

    async def list(self, path: str = ".", **options: Unpack[ListOptions]) -> builtins.list[FileInfo]:
        """Every entry of a directory, every page of it, ordered by path (a directory's entries right after it), as
        E2B's ``files.list(path, depth=...)``. Symlinks are listed, never descended into."""
        check_options(options, ListOptions, "list()")
        return [entry async for entry in self.entries(path, **options)]

    async def entries(self, path: str = ".", **options: Unpack[ListOptions]) -> AsyncIterator[FileInfo]:
        """The entries of :meth:`list` one at a time, fetching a page (1000 entries) when the loop needs it."""
        check_options(options, ListOptions, "entries()")
        depth = _non_negative(options.get("depth", 0), "depth")
        page_token = ""
        while True:
            files, metadata = self._rpc()
            page = await _unary(files.list(pb.ListRequest(path=path, depth=depth, page_token=page_token), metadata=metadata))
            for entry in page.entries:
                yield FileInfo.from_proto(entry)
            page_token = page.next_page_token
            if not page_token:
                return

    async def stat(self, path: str, **options: Unpack[StatOptions]) -> FileInfo:
        """Describes a file, directory or symlink (``follow_symlinks`` for what a symlink points to), as
        ``pathlib.Path.stat`` / E2B's ``files.get_info``."""
        check_options(options, StatOptions, "stat()")
        files, metadata = self._rpc()
        request = pb.StatRequest(path=path, follow_symlinks=options.get("follow_symlinks", False))
        return FileInfo.from_proto((await _unary(files.stat(request, metadata=metadata))).stat)

    async def get_info(self, path: str, **options: Unpack[StatOptions]) -> FileInfo:
        """The same as :meth:`stat`, under E2B's name."""
        check_options(options, StatOptions, "get_info()")
        return await self.stat(path, **options)

    async def exists(self, path: str) -> bool:
        """Whether something (a symlink included, even a dangling one) exists at the path, as E2B's ``exists``."""
        try:
            await self.stat(path)
        except PathNotFoundError:
            return False
        return True

    async def mkdir(self, path: str, **options: Unpack[MkdirOptions]) -> FileInfo:
        """Creates a directory, as ``pathlib.Path.mkdir``: with ``parents``, missing parents too, and an existing
        directory is no error; otherwise an existing entry is PathExistsError. Returns the directory's info."""
        check_options(options, MkdirOptions, "mkdir()")
        return (await self._make_dir(path, options))[0]

    async def make_dir(self, path: str) -> bool:
        """Creates a directory and its missing parents, as E2B's ``files.make_dir``: True when it created it, False
        when it existed."""
        return (await self._make_dir(path, {"parents": True}))[1]

    async def remove(self, path: str, **options: Unpack[RemoveOptions]) -> None:
        """Removes a file, a symlink (never what it points to) or a directory: an empty one, or with everything in it
        when ``recursive`` (E2B's ``files.remove``). ``missing_ok`` makes a missing path no error."""
        check_options(options, RemoveOptions, "remove()")
        files, metadata = self._rpc()
        try:
            await _unary(files.remove(pb.RemoveRequest(path=path, recursive=options.get("recursive", False)), metadata=metadata))
        except PathNotFoundError:
            if not options.get("missing_ok", False):
                raise

    async def rename(self, old_path: str, new_path: str, **options: Unpack[RenameOptions]) -> FileInfo:
        """Renames (moves) an entry atomically within one filesystem, as E2B's ``files.rename``; an existing
        destination is PathExistsError unless ``overwrite``. Returns the entry at its new path."""
        check_options(options, RenameOptions, "rename()")
        files, metadata = self._rpc()
        request = pb.MoveRequest(source=old_path, destination=new_path, overwrite=options.get("overwrite", False))
        return FileInfo.from_proto((await _unary(files.move(request, metadata=metadata))).stat)

    async def chmod(self, path: str, mode: int) -> FileInfo:
        """Changes the permission bits of a file or directory (``0o755``), as ``os.chmod``; returns its info."""
        files, metadata = self._rpc()
        return FileInfo.from_proto((await _unary(files.chmod(pb.ChmodRequest(path=path, mode=_mode(mode)), metadata=metadata))).stat)

    async def watch(self, path: str, **options: Unpack[WatchOptions]) -> AsyncFileWatch:
        """Watches a directory and returns once the watch is in place (every change after that is reported), as E2B's
        ``files.watch_dir``: ``async for event in watch`` yields :class:`~sandboxd.FileChange` s and
        :class:`~sandboxd.WatchOverflow` s; ``async with`` or ``close()`` ends it."""
        check_options(options, WatchOptions, "watch()")
        recursive = options.get("recursive", False)

        async def open_watch() -> tuple[grpc.aio.UnaryStreamCall[pb.WatchRequest, pb.WatchResponse], pb.WatchStarted]:
            files, metadata = self._rpc()
            call = files.watch(pb.WatchRequest(path=path, recursive=recursive), metadata=metadata)
            try:
                first = await call.read()
            except BaseException:
                call.cancel()
                raise
            if first is grpc.aio.EOF or not isinstance(first, pb.WatchResponse) or first.WhichOneof("event") != "started":
                call.cancel()
                raise SandboxError(f"the watch of {path} did not start with its started event", code="NO_START")
            return call, first.started

        try:
            call, started = await open_watch()
        except grpc.aio.AioRpcError as error:
            raise from_rpc_error(error) from error
        policy = self._reconnect()
        return AsyncFileWatch(call, FileInfo.from_proto(started.stat), started.watched_directories, open_watch, policy)

    async def _make_dir(self, path: str, options: MkdirOptions) -> tuple[FileInfo, bool]:
        files, metadata = self._rpc()
        request = pb.MakeDirRequest(path=path, parents=options.get("parents", False))
        if "mode" in options:
            request.mode = _mode(options["mode"])
        response = await _unary(files.make_dir(request, metadata=metadata))
        return FileInfo.from_proto(response.stat), response.created


_WatchCall = grpc.aio.UnaryStreamCall[pb.WatchRequest, pb.WatchResponse]


class AsyncFileWatch:
    """AsyncFileWatch is a watch in place on a directory: ``async for event in watch`` yields every change after
    ``watch()`` returned, in order, with a :class:`~sandboxd.WatchOverflow` where changes were lost. A watch whose
    connection breaks is set up again (with the sandbox's reconnect policy) and says so with a WatchOverflow of source
    ``reconnect``, since changes in between are unknown. The loop ends after ``close()`` (or leaving ``async with``),
    and when the watch ends by itself (the directory was removed or moved away: ``end_reason`` says which). One loop
    iterates it."""

    def __init__(
        self,
        call: _WatchCall,
        directory: FileInfo,
        watched_directories: int,
        reopen: Callable[[], Awaitable[tuple[_WatchCall, pb.WatchStarted]]],
        policy: ReconnectPolicy,
    ) -> None:
        """Internal: made by ``watch()``."""
        self._call = call
        self._reopen = reopen
        self._policy = policy
        #: The watched directory.
        self.directory = directory
        #: How many directories the daemon watches (1 unless recursive).
        self.watched_directories = watched_directories
        #: Why the watch ended by itself, once it did.
        self.end_reason: WatchEndReason | None = None
        self._closed = False

    def close(self) -> None:
        """Ends the watch (cancels the call); a loop over it ends quietly. Idempotent."""
        self._closed = True
        self._call.cancel()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent]:
        try:
            while not self._closed:
                try:
                    response = await self._call.read()
                except grpc.aio.AioRpcError as error:
                    if self._closed:
                        return
                    if not await self._reconnect(error):
                        return
                    yield WatchOverflow(source="reconnect", lost_events=0)
                    continue
                except asyncio.CancelledError:
                    if self._closed:
                        return
                    raise
                if response is grpc.aio.EOF or not isinstance(response, pb.WatchResponse):
                    if self.end_reason is None and not self._closed:
                        raise SandboxError(f"the watch of {self.directory.path} ended without its end event", code="NO_END")
                    return
                event = response.WhichOneof("event")
                if event == "change":
                    yield change_from_proto(response.change)
                elif event == "overflow":
                    yield overflow_from_proto(response.overflow)
                elif event == "ended":
                    self.end_reason = end_reason_from_proto(response.ended.reason)
        finally:
            self.close()

    async def _reconnect(self, error: grpc.aio.AioRpcError) -> bool:
        """Sets the watch up again after ``error``, with backoff: True once in place, False when closed meanwhile; a
        failure that is not the connection's, or too many in a row, is raised."""
        failures = 0
        while True:
            if self._closed:
                return False
            failures += 1
            if not is_transient(error) or failures > self._policy.max_attempts:
                raise from_rpc_error(error) from error
            await asyncio.sleep(self._policy.delay(failures))
            if self._closed:
                return False
            try:
                self._call, _ = await self._reopen()
                return True
            except grpc.aio.AioRpcError as failed:
                error = failed


async def _unary(call: grpc.aio.UnaryUnaryCall[Any, _Response]) -> _Response:
    """Awaits a unary call; its failure as the SandboxError of the daemon's reason."""
    try:
        return await call
    except grpc.aio.AioRpcError as error:
        raise from_rpc_error(error) from error


def _range(options: ReadTextOptions) -> ReadOptions:
    """The range of a read's options."""
    picked: ReadOptions = {}
    if "offset" in options:
        picked["offset"] = options["offset"]
    if "length" in options:
        picked["length"] = options["length"]
    return picked


def _non_negative(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative integer, not {value!r}", metadata={"field": name})
    return value


def _mode(mode: object) -> int:
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
        raise InvalidArgumentError(f"mode must be permission bits such as 0o644, not {mode!r}", metadata={"field": "mode"})
    return mode


async def _byte_source(data: WriteData) -> AsyncIterator[bytes]:
    """Any WriteData as bytes, read lazily: local files and file objects are read on a worker thread."""
    if isinstance(data, str):
        yield data.encode()
    elif isinstance(data, (bytes, bytearray, memoryview)):
        yield bytes(data)
    elif isinstance(data, os.PathLike):
        with open(os.fspath(data), "rb") as file:  # noqa: ASYNC230 - read below on a worker thread
            async for piece in _read_file(file):
                yield piece
    elif hasattr(data, "read"):
        async for piece in _read_file(data):  # type: ignore[arg-type]
            yield piece
    elif isinstance(data, AsyncIterable):
        async for item in data:
            yield _as_bytes(item)
    elif isinstance(data, Iterable):
        for item in data:
            yield _as_bytes(item)
    else:
        raise InvalidArgumentError(f"write() takes text, bytes, a path, a file object or an iterable, not {type(data).__name__}")


async def _read_file(file: IO[bytes]) -> AsyncIterator[bytes]:
    read: Callable[[int], bytes] = file.read
    while True:
        piece = await asyncio.to_thread(read, _MAX_MESSAGE_BYTES)
        if not piece:
            return
        yield _as_bytes(piece)


def _as_bytes(piece: object) -> bytes:
    if isinstance(piece, bytes):
        return piece
    if isinstance(piece, str):
        return piece.encode()
    if isinstance(piece, (bytearray, memoryview)):
        return bytes(piece)
    raise InvalidArgumentError(f"write() sources must yield bytes or text, not {type(piece).__name__}")


async def _messages(source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The source's bytes in messages of at most 1 MiB, small pieces gathered until 64 KiB."""
    pending = bytearray()
    async for piece in source:
        view = memoryview(piece)
        while len(view) > 0:
            if not pending and len(view) >= _MAX_MESSAGE_BYTES:
                yield bytes(view[:_MAX_MESSAGE_BYTES])
                view = view[_MAX_MESSAGE_BYTES:]
                continue
            take = min(len(view), _MAX_MESSAGE_BYTES - len(pending))
            pending += view[:take]
            view = view[take:]
            if len(pending) >= _MAX_MESSAGE_BYTES:
                yield bytes(pending)
                pending.clear()
        if len(pending) >= _MIN_MESSAGE_BYTES:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)
