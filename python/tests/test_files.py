"""sandbox.files, sync and asyncio, against a real daemon: round trips, streaming, errors by reason, cancellation,
resumed reads, watches and the client's memory while it streams."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import stat as stats
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

import sandboxd

from .conftest import FAST_RECONNECT
from .support import Daemon, TcpProxy, async_wait_for, run_python, wait_for


@pytest.fixture
def scratch(daemon: Daemon) -> Iterator[tuple[str, Path]]:
    """A fresh directory in the daemon's workspace: its name relative to the root, and its path."""
    name = f"py-{os.urandom(4).hex()}"
    directory = Path(daemon.workspace, name)
    directory.mkdir()
    yield name, directory


def test_write_and_read_text_bytes_chunks_ranges_files_and_iterables(sandbox: sandboxd.Sandbox, scratch: tuple[str, Path], tmp_path: Path) -> None:
    name, directory = scratch
    info = sandbox.files.write(f"{name}/text.txt", "héllo\n")
    assert (info.path, info.name, info.type, info.size, info.mode, info.permissions) == (
        str(directory / "text.txt"), "text.txt", sandboxd.FileType.FILE, 7, 0o644, "rw-r--r--"
    )
    assert sandbox.files.read_text(f"{name}/text.txt") == "héllo\n"
    assert sandbox.files.read(f"{name}/text.txt") == "héllo\n"
    data = os.urandom(2 * 1024 * 1024 + 5)
    sandbox.files.write(f"{name}/bytes.bin", data)
    sandbox.files.write(f"{name}/iterable.bin", (data[at : at + 1000] for at in range(0, len(data), 1000)))
    sandbox.files.write(f"{name}/fileobj.bin", io.BytesIO(data))
    local = tmp_path / "local.bin"
    local.write_bytes(data)
    sandbox.files.write(f"{name}/path.bin", local)
    for file in ("bytes.bin", "iterable.bin", "fileobj.bin", "path.bin"):
        assert (directory / file).read_bytes() == data, file
        assert sandbox.files.read_bytes(f"{name}/{file}") == data, file
    chunks = list(sandbox.files.iter(f"{name}/bytes.bin"))
    assert b"".join(chunks) == data and all(len(chunk) <= 1024 * 1024 for chunk in chunks)
    assert sandbox.files.read_bytes(f"{name}/bytes.bin", offset=1000, length=5000) == data[1000:6000]
    assert sandbox.files.read_bytes(f"{name}/bytes.bin", offset=len(data) + 10) == b""


def test_modes_parents_overwrite_and_expected_content(sandbox: sandboxd.Sandbox, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    assert sandbox.files.write(f"{name}/deep/er/run.sh", "#!/bin/sh\n", mode=0o755).mode == 0o755
    assert stats.S_IMODE((directory / "deep/er/run.sh").stat().st_mode) == 0o755
    with pytest.raises(sandboxd.PathExistsError) as exists:
        sandbox.files.write(f"{name}/deep/er/run.sh", "other", overwrite=False)
    assert isinstance(exists.value, FileExistsError)
    assert (exists.value.code, exists.value.reason) == ("ALREADY_EXISTS", "PATH_ALREADY_EXISTS")
    with pytest.raises(FileNotFoundError):
        sandbox.files.write(f"{name}/absent/file.txt", "x", create_parents=False)
    payload = os.urandom(10_000)
    sandbox.files.write(f"{name}/ok.bin", payload, expected_size=len(payload), expected_sha256=hashlib.sha256(payload).hexdigest())
    with pytest.raises(sandboxd.ContentMismatchError) as mismatch:
        sandbox.files.write(f"{name}/bad.bin", payload, expected_sha256="0" * 64)
    assert (mismatch.value.code, mismatch.value.reason) == ("DATA_LOSS", "CONTENT_MISMATCH")
    assert sorted(os.listdir(directory)) == ["deep", "ok.bin"]


def test_upload_and_download_keep_modes_and_leave_nothing_on_failure(sandbox: sandboxd.Sandbox, scratch: tuple[str, Path], tmp_path: Path) -> None:
    name, _ = scratch
    source = tmp_path / "tool"
    source.write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    source.chmod(0o750)
    assert sandbox.files.upload_file(source, f"{name}/tool").mode == 0o750
    target = tmp_path / "back"
    assert sandbox.files.download_file(f"{name}/tool", target).size == 3 * 1024 * 1024 + 7
    assert target.read_bytes() == source.read_bytes()
    assert stats.S_IMODE(target.stat().st_mode) == 0o750
    with pytest.raises(sandboxd.PathNotFoundError):
        sandbox.files.download_file(f"{name}/missing", tmp_path / "never")
    assert sorted(os.listdir(tmp_path)) == ["back", "tool"]


def test_list_stat_exists_mkdir_rename_chmod_remove(sandbox: sandboxd.Sandbox, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    for index in range(1500):
        (directory / f"f{index:04}").write_text("x" * (index % 7))
    (directory / "sub").mkdir()
    (directory / "sub" / "inner.txt").write_text("inner")
    (directory / "link").symlink_to("f0001")
    entries = sandbox.files.list(name)
    assert len(entries) == 1502
    by_name = {entry.name: entry for entry in entries}
    assert (by_name["f0006"].type, by_name["f0006"].size) == (sandboxd.FileType.FILE, 6)
    assert (by_name["link"].type, by_name["link"].symlink_target) == (sandboxd.FileType.SYMLINK, "f0001")
    assert by_name["sub"].is_dir and by_name["f0000"].uid == os.getuid()
    assert str(directory / "sub" / "inner.txt") in [entry.path for entry in sandbox.files.list(name, depth=2)]

    assert not sandbox.files.exists(f"{name}/a")
    assert sandbox.files.make_dir(f"{name}/a/b") is True
    assert sandbox.files.make_dir(f"{name}/a/b") is False
    assert sandbox.files.mkdir(f"{name}/c", mode=0o700).mode == 0o700
    with pytest.raises(sandboxd.PathExistsError):
        sandbox.files.mkdir(f"{name}/c")
    assert sandbox.files.mkdir(f"{name}/c", parents=True).is_dir
    assert sandbox.files.stat(f"{name}/link").type == sandboxd.FileType.SYMLINK
    assert sandbox.files.stat(f"{name}/link", follow_symlinks=True).type == sandboxd.FileType.FILE
    assert sandbox.files.rename(f"{name}/f0002", f"{name}/c/moved").path == str(directory / "c" / "moved")
    with pytest.raises(sandboxd.PathExistsError):
        sandbox.files.rename(f"{name}/f0003", f"{name}/c/moved")
    sandbox.files.rename(f"{name}/f0003", f"{name}/c/moved", overwrite=True)
    assert sandbox.files.chmod(f"{name}/c/moved", 0o600).permissions == "rw-------"
    with pytest.raises(sandboxd.DirectoryNotEmptyError):
        sandbox.files.remove(f"{name}/c")
    sandbox.files.remove(f"{name}/c", recursive=True)
    assert not (directory / "c").exists()
    with pytest.raises(sandboxd.PathNotFoundError):
        sandbox.files.remove(f"{name}/gone")
    sandbox.files.remove(f"{name}/gone", missing_ok=True)


def test_errors_by_reason_and_unknown_options(sandbox: sandboxd.Sandbox, scratch: tuple[str, Path]) -> None:
    name, _ = scratch
    sandbox.files.write(f"{name}/file", "x")
    cases: list[tuple[type[sandboxd.SandboxError], str, str]] = [
        (sandboxd.PathNotFoundError, "NOT_FOUND", "PATH_NOT_FOUND"),
        (sandboxd.PathOutsideWorkspaceError, "PERMISSION_DENIED", "PATH_OUTSIDE_WORKSPACE"),
        (sandboxd.IsDirectoryError, "FAILED_PRECONDITION", "IS_A_DIRECTORY"),
        (sandboxd.NotDirectoryError, "FAILED_PRECONDITION", "NOT_A_DIRECTORY"),
        (sandboxd.InvalidArgumentError, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
    ]
    calls: list[Callable[[], object]] = [
        lambda: sandbox.files.read_bytes(f"{name}/missing"),
        lambda: sandbox.files.read_bytes("../etc/passwd"),
        lambda: sandbox.files.read_bytes(name),
        lambda: sandbox.files.list(f"{name}/file"),
        lambda: sandbox.files.stat(""),
    ]
    for call, (cls, code, reason) in zip(calls, cases, strict=True):
        with pytest.raises(cls) as refused:
            call()
        assert (refused.value.code, refused.value.reason) == (code, reason)
    with pytest.raises(sandboxd.PathNotFoundError) as missing:
        sandbox.files.stat(f"{name}/missing")
    assert missing.value.path == f"{name}/missing"
    with pytest.raises(IsADirectoryError):
        sandbox.files.read_text(name)
    with pytest.raises(sandboxd.UnknownOptionError, match="did you mean length"):
        sandbox.files.read_bytes(f"{name}/file", lenght=1)  # type: ignore[call-arg]
    with pytest.raises(sandboxd.InvalidArgumentError):
        sandbox.files.chmod(f"{name}/file", 0o17777)


def test_a_read_cut_twice_resumes_at_its_offset_sha256_exact(daemon: Daemon, proxy: TcpProxy, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    data = os.urandom(32 * 1024 * 1024)
    (directory / "big").write_bytes(data)
    digest = hashlib.sha256()
    received = 0
    with sandboxd.connect(proxy.url, token=daemon.token or "", reconnect=FAST_RECONNECT) as cut:
        for chunk in cut.files.iter(f"{name}/big"):
            digest.update(chunk)
            received += len(chunk)
            if (received > 6 * 1024 * 1024 and proxy.cuts == 0) or (received > 20 * 1024 * 1024 and proxy.cuts == 1):
                proxy.cut()
        assert proxy.cuts == 2
    assert received == len(data)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_read_does_not_resume_into_a_changed_file(daemon: Daemon, proxy: TcpProxy, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    # Large enough that the read is still going when the connection is cut, whatever the buffers hold.
    (directory / "big").write_bytes(os.urandom(64 * 1024 * 1024))
    with sandboxd.connect(proxy.url, token=daemon.token or "", reconnect=FAST_RECONNECT) as cut:
        with pytest.raises(sandboxd.FileChangedError) as changed:
            received = 0
            for chunk in cut.files.iter(f"{name}/big"):
                received += len(chunk)
                if received > 4 * 1024 * 1024 and proxy.cuts == 0:
                    # A new file in its place (the daemon's open one reads on, so only the resume can notice).
                    (directory / "big.new").write_bytes(b"replaced")
                    (directory / "big.new").replace(directory / "big")
                    proxy.cut()
        assert changed.value.code == "FILE_CHANGED"


def test_watch_yields_changes_ends_on_close_and_when_its_directory_goes(sandbox: sandboxd.Sandbox, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    (directory / "sub").mkdir()
    with sandbox.files.watch(name, recursive=True) as watch:
        assert (watch.directory.path, watch.watched_directories) == (str(directory), 2)
        (directory / "sub" / "new.txt").write_text("x")
        for event in watch:
            if isinstance(event, sandboxd.FileChange) and event.type == "create" and event.path == str(directory / "sub" / "new.txt"):
                assert not event.is_directory
                break
    gone = sandbox.files.watch(f"{name}/sub")
    (directory / "sub" / "other.txt").write_text("y")
    wait_for(lambda: (directory / "sub" / "other.txt").exists())
    for path in (directory / "sub").iterdir():
        path.unlink()
    (directory / "sub").rmdir()
    events = list(gone)
    assert sandboxd.FileChange(type="create", path=str(directory / "sub" / "other.txt"), is_directory=False) in events
    assert gone.end_reason == "directory-removed"


async def test_async_round_trip_streams_and_watch(async_sandbox: sandboxd.AsyncSandbox, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    data = os.urandom(3 * 1024 * 1024 + 1)

    async def pieces() -> AsyncIterator[bytes]:
        for at in range(0, len(data), 100_000):
            yield data[at : at + 100_000]

    info = await async_sandbox.files.write(f"{name}/a.bin", pieces())
    assert info.size == len(data)
    assert (directory / "a.bin").read_bytes() == data
    assert await async_sandbox.files.read_bytes(f"{name}/a.bin") == data
    assert b"".join([chunk async for chunk in async_sandbox.files.iter(f"{name}/a.bin", offset=10)]) == data[10:]
    assert [entry.name for entry in await async_sandbox.files.list(name)] == ["a.bin"]
    assert await async_sandbox.files.exists(f"{name}/a.bin")
    with pytest.raises(sandboxd.PathNotFoundError):
        await async_sandbox.files.read_text(f"{name}/missing")
    async with await async_sandbox.files.watch(name) as watch:
        (directory / "b.txt").write_text("b")
        async for event in watch:
            if isinstance(event, sandboxd.FileChange) and event.path == str(directory / "b.txt"):
                break
    await async_sandbox.files.remove(f"{name}/a.bin")


async def test_a_cancelled_async_upload_leaves_nothing_and_the_old_file_intact(async_sandbox: sandboxd.AsyncSandbox, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    (directory / "target").write_text("old")
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        while True:
            yield os.urandom(256 * 1024)
            sent += 256 * 1024

    task = asyncio.create_task(async_sandbox.files.write(f"{name}/target", endless()))
    await async_wait_for(lambda: sent >= 8 * 1024 * 1024, what="8 MiB sent", timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await async_wait_for(lambda: os.listdir(directory) == ["target"], what="the temporary file to go", timeout=20)
    assert (directory / "target").read_text() == "old"


def test_a_sync_upload_interrupted_by_ctrl_c_leaves_nothing(daemon: Daemon, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    code = """
import os, signal, sys, threading, sandboxd
sandbox = sandboxd.connect(sys.argv[1], token=sys.argv[2])
def endless():
    sent = 0
    while True:
        yield os.urandom(256 * 1024)
        sent += 256 * 1024
        if sent == 8 * 1024 * 1024:
            threading.Timer(0.01, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    sandbox.files.write(sys.argv[3], endless())
except KeyboardInterrupt:
    print("interrupted")
"""
    result = run_python(code, daemon.url, daemon.token or "", f"{name}/target", timeout=120)
    assert result.stdout.strip() == "interrupted", result.stderr
    wait_for(lambda: os.listdir(directory) == [], what="the temporary file to go", timeout=20)


def test_the_client_streams_256_mib_with_bounded_memory(daemon: Daemon, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    code = """
import hashlib, json, os, re, sys, sandboxd
size = int(sys.argv[4])
block = os.urandom(1024 * 1024)
def high_water():
    # This process's peak RSS (VmHWM), which starts anew at exec; getrusage's maxrss keeps the parent's.
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
def pieces(hash):
    for index in range(size // len(block)):
        piece = bytes([index % 256]) + block[1:]
        hash.update(piece)
        yield piece
with sandboxd.connect(sys.argv[1], token=sys.argv[2]) as sandbox:
    sandbox.files.write(sys.argv[3] + ".warm", block * 4)
    for _ in sandbox.files.iter(sys.argv[3] + ".warm"):
        pass
    baseline = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    up = hashlib.sha256()
    info = sandbox.files.write(sys.argv[3], pieces(up))
    down = hashlib.sha256()
    for chunk in sandbox.files.iter(sys.argv[3]):
        down.update(chunk)
    peak = high_water()
print(json.dumps({"size": info.size, "up": up.hexdigest(), "down": down.hexdigest(), "baseline": baseline, "peak": peak}))
"""
    size = 256 * 1024 * 1024
    result = run_python(code, daemon.url, daemon.token or "", f"{name}/big", str(size), timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["size"] == size
    assert report["up"] == report["down"]
    assert hashlib.sha256((directory / "big").read_bytes()).hexdigest() == report["up"]
    # A client that kept what it streams would grow by 256 MiB or more; it grew by 15 MiB on a 2-core machine.
    assert report["peak"] - report["baseline"] < 64 * 1024 * 1024, report


async def test_an_async_watch_read_too_slowly_reports_an_overflow(async_sandbox: sandboxd.AsyncSandbox, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    watch = await async_sandbox.files.watch(name)
    # Nobody reads while far more changes happen than the daemon queues for one watch.
    result = await async_sandbox.exec(f"cd {directory} && seq 1 60000 | xargs touch && seq 1 60000 | xargs rm", timeout=120)
    assert result.exit_code == 0
    overflow: sandboxd.WatchOverflow | None = None
    async with watch:
        async for event in watch:
            if isinstance(event, sandboxd.WatchOverflow):
                overflow = event
                break
    assert overflow is not None and overflow.source == "client" and overflow.type == "overflow"


def test_a_watch_on_a_broken_connection_is_set_up_again_and_says_so(daemon: Daemon, proxy: TcpProxy, scratch: tuple[str, Path]) -> None:
    name, directory = scratch
    with sandboxd.connect(proxy.url, token=daemon.token or "", reconnect=FAST_RECONNECT) as cut, cut.files.watch(name) as watch:
        events = iter(watch)
        # Directories: one event each (a file's write would be another).
        (directory / "before").mkdir()
        assert next(events) == sandboxd.FileChange(type="create", path=str(directory / "before"), is_directory=True)
        assert proxy.cut() > 0
        assert next(events) == sandboxd.WatchOverflow(source="reconnect", lost_events=0)
        (directory / "after").mkdir()
        assert next(events) == sandboxd.FileChange(type="create", path=str(directory / "after"), is_directory=True)


@pytest.mark.skipif(os.getuid() != 0, reason="mknod needs root")
def test_a_device_read_stopped_at_the_daemons_limit_raises_read_limit_error() -> None:
    limited = Daemon("--max-unsized-read-bytes", "100000")
    try:
        # A character device like /dev/zero (1, 5), made inside the workspace: it has no size and never ends.
        os.mknod(Path(limited.workspace, "zero"), stats.S_IFCHR | 0o666, os.makedev(1, 5))
        with sandboxd.connect(limited.url, token="") as sandbox:
            assert sandbox.files.stat("zero").type == sandboxd.FileType.CHARACTER_DEVICE
            with pytest.raises(sandboxd.ReadLimitError) as stopped:
                sandbox.files.read_bytes("zero")
            assert (stopped.value.code, stopped.value.metadata["limit_bytes"]) == ("READ_LIMIT_REACHED", "100000")
            received = 0
            with pytest.raises(sandboxd.ReadLimitError):
                for chunk in sandbox.files.iter("zero"):
                    received += len(chunk)
            assert received == 100_000
            assert len(sandbox.files.read_bytes("zero", length=4096)) == 4096
    finally:
        limited.close()
