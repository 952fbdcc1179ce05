"""The sync API: Sandbox, CommandHandle and Processes, thin wrappers running the asyncio core on a Portal."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Literal, Self, Unpack

from ._async_sandbox import AsyncSandbox, SandboxOptions
from ._files_sync import Files
from ._handle import AsyncCommandHandle
from ._portal import Portal
from ._readiness import ListeningPort, LogMatch, PortMode, PortReady

from .lifecycle import SandboxStatus
from .options import Command, ExecOptions, ProcessOptions, check_options
from .output import InputAck, OutputChunk, StreamName
from .records import CommandResult, ExecEvent, ExitCause, ProcessExit, ProcessInfo, ProcessLogs, ProcessStatus


class CommandHandle:
    """CommandHandle is a live handle to one command in the sandbox (the LangSmith sandbox SDK), for synchronous code.

    The same handle as :class:`~sandboxd.AsyncCommandHandle`, method for method: ``for chunk in handle`` yields
    output chunks as they arrive (auto-reconnecting with backoff and jitter), ``wait()`` returns the result,
    ``kill()``, ``send_input()``, ``close_input()``, ``resize()``, ``reconnect()``; ``with handle:`` kills the
    command on leaving the block (a KeyboardInterrupt included) if it is still running.
    """

    #: The LangSmith sandbox SDK's name for the default reconnect attempts.
    MAX_AUTO_RECONNECTS = AsyncCommandHandle.MAX_AUTO_RECONNECTS
    #: The LangSmith sandbox SDK's name for the default first backoff, in seconds.
    BACKOFF_BASE = AsyncCommandHandle.BACKOFF_BASE
    #: The LangSmith sandbox SDK's name for the default largest backoff, in seconds.
    BACKOFF_MAX = AsyncCommandHandle.BACKOFF_MAX

    def __init__(self, handle: AsyncCommandHandle, portal: Portal) -> None:
        """Internal: handles are made by the sandbox."""
        self._handle = handle
        self._portal = portal

    @property
    def aio(self) -> AsyncCommandHandle:
        """The asyncio handle this one wraps."""
        return self._handle

    @property
    def process_id(self) -> str:
        """The process id (client-chosen or a UUID)."""
        return self._handle.process_id

    @property
    def command_id(self) -> str:
        """The process id, named as the LangSmith sandbox SDK names it."""
        return self._handle.command_id

    @property
    def pid(self) -> int | None:
        """Operating-system pid on the sandbox, also its process group id."""
        return self._handle.pid

    @property
    def command(self) -> str:
        """The command as given."""
        return self._handle.command

    @property
    def args(self) -> tuple[str, ...]:
        """The arguments as given, for argv form."""
        return self._handle.args

    @property
    def session_id(self) -> str | None:
        """Session the process belongs to."""
        return self._handle.session_id

    @property
    def info(self) -> ProcessInfo | None:
        """The process record as last seen."""
        return self._handle.info

    @property
    def status(self) -> ProcessStatus:
        """Status as last seen."""
        return self._handle.status

    @property
    def exit(self) -> ProcessExit | None:
        """How the process ended, once known."""
        return self._handle.exit

    @property
    def exit_code(self) -> int | None:
        """The exit code once known."""
        return self._handle.exit_code

    @property
    def cause(self) -> ExitCause | None:
        """Why the process ended, once known (see :class:`ExitCause`), else None."""
        return self._handle.cause

    @property
    def last_stdout_offset(self) -> int:
        """Offset after the last stdout byte received: where a reconnect resumes."""
        return self._handle.last_stdout_offset

    @property
    def last_stderr_offset(self) -> int:
        """Offset after the last stderr byte received: where a reconnect resumes."""
        return self._handle.last_stderr_offset

    @property
    def auto_reconnects(self) -> int:
        """How many times the handle reconnected on its own."""
        return self._handle.auto_reconnects

    def __iter__(self) -> Iterator[OutputChunk]:
        """Yields output chunks, stdout and stderr interleaved in arrival order."""
        return self._portal.iterate(aiter(self._handle))

    def wait(self, timeout: float | None = None) -> CommandResult:
        """Waits for the exit and returns the result; ``timeout`` (seconds) bounds the wait only."""
        return self._portal.call(self._handle.wait, timeout)

    def kill(self, signal: str | int = "SIGTERM", *, grace_period: float | None = None) -> None:
        """Signals the command's process group (see AsyncCommandHandle.kill)."""
        self._portal.call(self._handle.kill, signal, grace_period=grace_period)

    def send_input(self, data: str | bytes) -> InputAck:
        """Writes text (as UTF-8) or bytes to the command's stdin or PTY."""
        return self._portal.call(self._handle.send_input, data)

    def close_input(self) -> InputAck:
        """Closes the command's stdin (EOF; ^D to a PTY)."""
        return self._portal.call(self._handle.close_input)

    def resize(self, cols: int, rows: int) -> InputAck:
        """Resizes the command's PTY."""
        return self._portal.call(self._handle.resize, cols, rows)

    def reconnect(self) -> CommandHandle:
        """A new handle resuming exactly at the last offsets; this one stops following."""
        return CommandHandle(self._portal.call(self._handle.reconnect), self._portal)

    def detach(self) -> None:
        """Stops following the command; it keeps running."""
        self._portal.call(self._handle.detach)

    def refresh(self) -> ProcessStatus:
        """Refreshes the record from the daemon and returns the status."""
        return self._portal.call(self._handle.refresh)

    def logs(self) -> ProcessLogs:
        """The output the daemon still retains for this process (a snapshot)."""
        return self._portal.call(self._handle.logs)

    def wait_for_port(
        self,
        port: int,
        *,
        timeout: float | None = None,
        mode: PortMode = "http",
        path: str = "/",
        status: int | tuple[int, int] = (200, 399),
        host: str | None = None,
        interval: float | None = None,
    ) -> PortReady:
        """Waits until ``port`` answers inside the sandbox (HTTP 200-399 on ``path`` by default, ``mode="tcp"`` a
        connection); fails at once when this process exits first (see AsyncCommandHandle.wait_for_port)."""
        return self._portal.call(
            self._handle.wait_for_port, port, timeout=timeout, mode=mode, path=path, status=status, host=host, interval=interval
        )

    def wait_for_log(
        self,
        pattern: str | re.Pattern[str],
        *,
        timeout: float | None = None,
        stream: StreamName | Literal["both"] = "both",
        stdout_offset: int = 0,
        stderr_offset: int = 0,
    ) -> LogMatch:
        """Waits until a line of this process's output matches ``pattern``, a line printed before the call included
        (see AsyncCommandHandle.wait_for_log)."""
        return self._portal.call(
            self._handle.wait_for_log,
            pattern,
            timeout=timeout,
            stream=stream,
            stdout_offset=stdout_offset,
            stderr_offset=stderr_offset,
        )

    def wait_for_exit(self, *, timeout: float | None = None) -> ProcessExit:
        """Waits until this process exits and returns how it ended (see AsyncCommandHandle.wait_for_exit)."""
        return self._portal.call(self._handle.wait_for_exit, timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        """Kills the command if it is still running, waits for its exit, and detaches."""
        self._portal.call(self._handle.__aexit__, exc_type, exc, traceback)


class Processes:
    """Processes manages a sandbox's processes: ``list``, ``get``, ``attach``, ``kill``, ``kill_all``, ``cleanup``,
    ``logs`` (see AsyncProcesses)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def list(self, *, all: bool = False, status: Iterable[ProcessStatus | str] | None = None) -> list[CommandHandle]:  # noqa: A002
        """Lists processes as handles, oldest first: this sandbox's sessions, or every process with ``all``."""
        handles = self._sandbox._portal.call(self._sandbox.aio.processes.list, all=all, status=status)
        return [CommandHandle(handle, self._sandbox._portal) for handle in handles]

    def get(self, process_id: str) -> CommandHandle | None:
        """A handle of any process by id, or None when the daemon knows none."""
        handle = self._sandbox._portal.call(self._sandbox.aio.processes.get, process_id)
        return None if handle is None else CommandHandle(handle, self._sandbox._portal)

    def attach(self, process_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0) -> CommandHandle:
        """A handle of a process whose stream starts at the given offsets. ProcessNotFoundError when unknown."""
        handle = self._sandbox._portal.call(
            self._sandbox.aio.processes.attach, process_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset
        )
        return CommandHandle(handle, self._sandbox._portal)

    def kill(self, process_id: str, signal: str | int = "SIGTERM", *, grace_period: float | None = None) -> None:
        """Signals a process's group. ProcessNotFoundError when unknown."""
        self._sandbox._portal.call(self._sandbox.aio.processes.kill, process_id, signal, grace_period=grace_period)

    def kill_all(self, signal: str | int = "SIGTERM", *, grace_period: float | None = None) -> int:
        """Signals every live process of this sandbox's sessions; returns how many."""
        return self._sandbox._portal.call(self._sandbox.aio.processes.kill_all, signal, grace_period=grace_period)

    def cleanup(self) -> int:
        """Removes the records of exited processes of this sandbox's sessions; returns how many."""
        return self._sandbox._portal.call(self._sandbox.aio.processes.cleanup)

    def logs(self, process_id: str) -> ProcessLogs:
        """The output the daemon retains for a process. ProcessNotFoundError when unknown."""
        return self._sandbox._portal.call(self._sandbox.aio.processes.logs, process_id)


class Sandbox:
    """Sandbox is a synchronous client of one sandboxd daemon: the same surface as :class:`~sandboxd.AsyncSandbox`,
    each call run on an event loop thread the process's sync sandboxes share.

    ``with sandboxd.connect(url, token=...) as sandbox:`` connects, and leaving the block closes the sandbox
    (background processes run on; ``close(kill_processes=True)`` kills them). A KeyboardInterrupt during ``exec()`` or an ``exec_stream()`` loop cancels
    the call, and the daemon kills the command before the interrupt goes on.
    """

    def __init__(self, url: str | None = None, **options: Unpack[SandboxOptions]) -> None:
        """Creates a sandbox in state ``init``; see AsyncSandbox for ``url`` and the options."""
        self._portal = Portal.shared()
        self._async = AsyncSandbox(url, **options)
        #: Process management: list, get, attach, kill, kill_all, cleanup, logs.
        self.processes = Processes(self)
        #: The file API: read, write, list, stat, watch... the files inside the daemon's workspace roots, streamed.
        self.files = Files(lambda: self.aio.files, self._portal)

    @classmethod
    def connect(cls, url: str | None = None, **options: Unpack[SandboxOptions]) -> Self:
        """Creates a sandbox and starts it."""
        sandbox = cls(url, **options)
        sandbox.start()
        return sandbox

    @property
    def aio(self) -> AsyncSandbox:
        """The asyncio sandbox this one wraps (to be used on its own loop only)."""
        return self._async

    @property
    def url(self) -> str:
        """The daemon's URL."""
        return self._async.url

    @property
    def sandbox_id(self) -> str:
        """The sandbox id."""
        return self._async.sandbox_id

    @property
    def session_id(self) -> str:
        """Session of this sandbox's commands."""
        return self._async.session_id

    @property
    def status(self) -> SandboxStatus:
        """Current lifecycle state."""
        return self._async.status

    @property
    def timeout(self) -> float | None:
        """Default time limit of waiting commands, in seconds."""
        return self._async.timeout

    @property
    def workspace(self) -> list[str]:
        """A copy of the allowed workspace directories."""
        return self._async.workspace

    def describe(self) -> dict[str, Any]:
        """Describes the sandbox (the Orbiter sandbox's ``describe()``)."""
        return self._async.describe()

    def start(self) -> None:
        """Connects and checks the daemon answers (see AsyncSandbox.start)."""
        self._portal.call(self._async.start)

    def stop(self) -> None:
        """Kills this sandbox's processes and releases the connection: ``running`` to ``idle``."""
        self._portal.call(self._async.stop)

    def close(self, *, kill_processes: bool = False) -> None:
        """Closes the sandbox for good; background processes run on unless ``kill_processes=True`` (see
        AsyncSandbox.close)."""
        self._portal.call(self._async.close, kill_processes=kill_processes)

    def __enter__(self) -> Self:
        if self.status != SandboxStatus.RUNNING:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()

    def exec(self, command: Command, **options: Unpack[ExecOptions]) -> CommandResult:
        """Runs a command and waits for it (as the Cloudflare and Together sandbox SDKs' exec); see AsyncSandbox.exec."""
        return self._portal.call(self._async.exec, command, **options)

    def exec_stream(self, command: Command, **options: Unpack[ExecOptions]) -> Iterator[ExecEvent]:
        """Runs a command as an iterator of ExecEvents; leaving the loop early kills the command."""
        check_options(options, ExecOptions, "exec_stream()")
        return self._portal.iterate(self._async.exec_stream(command, **options))

    def start_process(self, command: Command, **options: Unpack[ProcessOptions]) -> CommandHandle:
        """Starts a background process and returns its live, resumable handle; see AsyncSandbox.start_process."""
        # A Ctrl-C that lands just as the process has started must not leave it running with no handle anywhere.
        started = self._portal.call_owned(self._async.start_process, _kill_unclaimed, command, **options)
        return CommandHandle(started, self._portal)

    def wait_for_port(
        self,
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
        """Waits until ``port`` answers inside the sandbox, tied to ``process_id`` when given; see
        AsyncSandbox.wait_for_port."""
        return self._portal.call(
            self._async.wait_for_port,
            port,
            process_id=process_id,
            timeout=timeout,
            mode=mode,
            path=path,
            status=status,
            host=host,
            interval=interval,
        )

    def list_ports(self, *, process_id: str | None = None) -> list[ListeningPort]:
        """The TCP ports listening inside the sandbox with the process holding each; see AsyncSandbox.list_ports."""
        return self._portal.call(self._async.list_ports, process_id=process_id)


async def _kill_unclaimed(handle: AsyncCommandHandle) -> None:
    await handle.kill("SIGKILL")


def connect(url: str | None = None, **options: Unpack[SandboxOptions]) -> Sandbox:
    """Connects to a daemon: creates a :class:`Sandbox` and starts it. Use it in a ``with`` block to close it at the
    end (background processes run on; see :meth:`Sandbox.close`)."""
    return Sandbox.connect(url, **options)


async def connect_async(url: str | None = None, **options: Unpack[SandboxOptions]) -> AsyncSandbox:
    """Connects to a daemon from asyncio: creates an :class:`AsyncSandbox` and starts it."""
    return await AsyncSandbox.connect(url, **options)
