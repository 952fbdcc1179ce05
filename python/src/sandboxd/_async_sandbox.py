"""AsyncSandbox: the asyncio client of one daemon, and the core the sync Sandbox wraps."""

from __future__ import annotations

import asyncio
import codecs
import datetime
import math
import secrets
import uuid
import weakref
from collections.abc import AsyncGenerator, Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypedDict, Unpack

import grpc
import grpc.aio

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from ._files import AsyncFiles
from . import _readiness as readiness
from ._handle import AsyncCommandHandle, HandleContext, fetch_logs, grace_ms, signal_name
from ._readiness import ListeningPort, PortMode, PortReady
from ._reconnect import ReconnectPolicy
from ._transport import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Keepalive,
    SandboxRpc,
    Tls,
    check_cleartext_token,
    create_channel,
    resolve_token,
    resolve_url,
    tls_mismatch,
)
from .errors import InvalidArgumentError, SandboxError, SandboxUnavailableError, from_rpc_error
from .lifecycle import Lifecycle, SandboxStatus
from .options import Command, ExecOptions, ProcessOptions, SpecDefaults, build_spec, check_options
from .output import StreamDecoder, StreamName
from .records import CommandResult, ExecEvent, ProcessInfo, ProcessLogs, ProcessStatus


class SandboxOptions(TypedDict, total=False):
    """Options of a sandbox (``connect()``, ``Sandbox(...)``, ``AsyncSandbox(...)``)."""

    #: Bearer token, sent as ``authorization: Bearer <token>`` on every call; when absent, ``$SANDBOXD_TOKEN`` (the
    #: variable the daemon, the CLI and the TypeScript client read); None or "" for none.
    token: str | None
    #: Send the token over cleartext ``http://`` to a host that is not loopback. Without it such a sandbox is refused
    #: (InvalidArgumentError): anyone on the path could read the token and run commands with it. False by default;
    #: use ``https://`` instead where you can.
    allow_cleartext_token: bool
    #: Default time limit of waiting commands (exec, exec_stream) in seconds; 30 by default (as the Orbiter sandbox's), None for
    #: none. Background processes have none unless asked.
    timeout: float | None
    #: Identifier of this sandbox; 12 random hex characters by default.
    sandbox_id: str
    #: Session of the commands this sandbox starts; the sandbox id by default. close() kills its processes.
    session_id: str
    #: Allowed workspace directories on the daemon's machine; the first is the default working directory and a
    #: ``cwd`` outside all of them is refused before any call. Empty by default: the daemon confines ``cwd`` anyway.
    workspace: Iterable[str]
    #: Encoding of the ``.text`` helpers and text events; UTF-8 by default.
    encoding: str
    #: HTTP/2 keepalive pings that find a dead path (20 s interval, 10 s timeout by default).
    keepalive: Keepalive
    #: How background handles reconnect on their own (5 attempts, 0.5 s doubling to 10 s, jittered).
    reconnect: ReconnectPolicy
    #: Seconds ``start()`` waits for the daemon to answer; 10 by default.
    connect_timeout: float
    #: CAs and client certificate for an ``https://`` daemon.
    tls: Tls
    #: Extra metadata (headers) sent on every call.
    headers: Mapping[str, str]
    #: Largest request message sent, in bytes; 4 MiB by default, the daemon's default ``--max-message-bytes``.
    max_message_bytes: int


class AsyncSandbox:
    """AsyncSandbox is an asyncio client of one sandboxd daemon with the Orbiter sandbox's lifecycle.

    ``init`` until ``start()``, ``running`` while connected, ``idle`` after ``stop()``, ``error`` when a restart
    failed, ``closed`` after ``close()``; commands run only while ``running`` (SandboxError ``NOT_RUNNING``).
    ``async with AsyncSandbox(url) as sandbox`` starts it and closes it on leaving; background processes run on (a
    dev server outlives the script), unless closed with ``close(kill_processes=True)``. Waiting commands (``exec``, ``exec_stream``) go through Exec, so cancelling them (task cancel, a
    KeyboardInterrupt in the sync API, leaving an ``exec_stream`` loop) or losing this client kills them on the
    daemon; background processes (``start_process``) outlive their calls and are followed through resumable log
    streams.
    """

    def __init__(self, url: str | None = None, **options: Unpack[SandboxOptions]) -> None:
        """Creates a sandbox in state ``init`` for the daemon at ``url`` (``http://host:port`` or
        ``https://host:port``; ``$SANDBOXD_URL`` when None, else ``http://127.0.0.1:7007``). Raises
        InvalidArgumentError for a bad URL, an unknown option, or a token that would go in clear (see
        ``allow_cleartext_token``)."""
        check_options(options, SandboxOptions, "AsyncSandbox()")
        #: The daemon's URL.
        self.url = resolve_url(url)
        self._token = resolve_token(options)
        check_cleartext_token(self.url, self._token, options.get("allow_cleartext_token", False))
        #: The sandbox id.
        self.sandbox_id = options.get("sandbox_id") or secrets.token_hex(6)
        #: Session of this sandbox's commands.
        self.session_id = options.get("session_id") or self.sandbox_id
        self._options = options
        self._encoding = _checked_encoding(options.get("encoding", "utf-8"))
        self._defaults = SpecDefaults(
            session_id=self.session_id,
            timeout=options.get("timeout", 30.0),
            workspace=tuple(options.get("workspace", ())),
        )
        self._sessions = {self.session_id}
        self._lifecycle = Lifecycle()
        self._rpc: SandboxRpc | None = None
        self._handles: weakref.WeakSet[AsyncCommandHandle] = weakref.WeakSet()
        #: Process management: list, get, attach, kill, kill_all, cleanup, logs.
        self.processes = AsyncProcesses(self)
        #: The file API: read, write, list, stat, watch... the files inside the daemon's workspace roots, streamed.
        self.files = AsyncFiles(self._running_rpc, lambda: self._options.get("reconnect", ReconnectPolicy()))

    @classmethod
    async def connect(cls, url: str | None = None, **options: Unpack[SandboxOptions]) -> Self:
        """Creates a sandbox and starts it (connects and checks the daemon answers and takes the token)."""
        sandbox = cls(url, **options)
        await sandbox.start()
        return sandbox

    @property
    def status(self) -> SandboxStatus:
        """Current lifecycle state."""
        return self._lifecycle.status

    @property
    def timeout(self) -> float | None:
        """Default time limit of waiting commands, in seconds."""
        return self._defaults.timeout

    @property
    def workspace(self) -> list[str]:
        """A copy of the allowed workspace directories."""
        return list(self._defaults.workspace)

    def describe(self) -> dict[str, Any]:
        """Describes the sandbox (the Orbiter sandbox's ``describe()``): id, status, workspace, timeout, session and url."""
        return {
            "sandbox_id": self.sandbox_id,
            "status": self.status,
            "workspace": self.workspace,
            "timeout": self.timeout,
            "session_id": self.session_id,
            "url": self.url,
        }

    async def start(self) -> None:
        """Connects and checks that the daemon answers (and takes the token): ``init``, ``idle`` or ``error`` to
        ``running``. On failure the connection is released, the sandbox goes to ``error`` (from ``idle``; from
        ``init`` it stays ``init``) and the failure is raised (SandboxUnavailableError, AuthenticationError...)."""
        if self.status in (SandboxStatus.RUNNING, SandboxStatus.CLOSED):
            self._lifecycle.transition(SandboxStatus.RUNNING)
        options = self._options
        channel = create_channel(
            self.url,
            keepalive=options.get("keepalive", Keepalive()),
            tls=options.get("tls"),
            max_message_bytes=options.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES),
        )
        metadata = dict(options.get("headers", {}))
        if self._token is not None:
            metadata["authorization"] = f"Bearer {self._token}"
        rpc = SandboxRpc(channel, metadata)
        try:
            await rpc.list_processes(
                pb.ListProcessesRequest(session_id=self.session_id), metadata=rpc.metadata, timeout=options.get("connect_timeout", 10.0)
            )
        except BaseException as error:
            await channel.close()
            if self.status == SandboxStatus.IDLE:
                self._lifecycle.transition(SandboxStatus.ERROR)
            if isinstance(error, grpc.aio.AioRpcError):
                mismatch = tls_mismatch(self.url, f"{error.details()} {error.debug_error_string()}")
                if mismatch is not None:
                    raise SandboxUnavailableError(mismatch) from error
                raise from_rpc_error(error, timeout=options.get("connect_timeout", 10.0)) from error
            raise
        self._rpc = rpc
        self._lifecycle.transition(SandboxStatus.RUNNING)

    async def stop(self) -> None:
        """Kills the processes of this sandbox's sessions, stops following them and releases the connection:
        ``running`` to ``idle``. ``start()`` may follow. If the daemon cannot be reached the sandbox goes to
        ``error`` and the failure is raised."""
        if self.status != SandboxStatus.RUNNING:
            self._lifecycle.transition(SandboxStatus.IDLE)
        try:
            await self.processes.kill_all()
        except SandboxError:
            await self._release()
            self._lifecycle.transition(SandboxStatus.ERROR)
            raise
        await self._release()
        self._lifecycle.transition(SandboxStatus.IDLE)

    async def close(self, *, kill_processes: bool = False) -> None:
        """Closes the sandbox for good: releases the connection (waiting commands still running end, and the daemon
        kills them) and goes to ``closed``. Background processes (``start_process``) keep running, as when a script
        just exits: a dev server outlives the script that started it; ``kill_processes=True`` kills this sandbox's
        sessions' live processes first (a daemon that cannot be reached is ignored). Leaving ``async with`` closes
        the same way. Closing a closed sandbox does nothing."""
        if self.status == SandboxStatus.CLOSED:
            return
        if self.status == SandboxStatus.RUNNING and kill_processes:
            try:
                await self.processes.kill_all()
            except SandboxError:
                pass
        await self._release()
        self._lifecycle.transition(SandboxStatus.CLOSED)

    async def __aenter__(self) -> Self:
        if self.status != SandboxStatus.RUNNING:
            await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()

    async def exec(self, command: Command, **options: Unpack[ExecOptions]) -> CommandResult:
        """Runs a command and waits for it (as the Cloudflare and Together sandbox SDKs' exec): returns its :class:`~sandboxd.CommandResult` whatever
        the exit code (``exit_code``, ``stdout``, ``stderr``, ``output``). Raises a SandboxError when the daemon
        refuses the command or the stream ends without an exit (never an invented exit code). Cancelling the call
        kills the command."""
        check_options(options, ExecOptions, "exec()")
        handle = await self._exec_handle(command, options, options.get("max_retained_bytes", math.inf))
        try:
            return await handle.wait()
        finally:
            # After the exit this does nothing; on any failure or cancellation it cancels the call, which kills it.
            await handle._stop(SandboxError("the command was cancelled", code="CANCELLED"))

    async def exec_stream(self, command: Command, **options: Unpack[ExecOptions]) -> AsyncGenerator[ExecEvent, None]:
        """Runs a command as an async iterator of :class:`~sandboxd.ExecEvent` s (the Cloudflare Sandbox SDK): ``start``,
        ``stdout``/``stderr`` output as it arrives, then ``complete`` with the result. Leaving the loop early (or
        closing the iterator, e.g. with ``contextlib.aclosing``) kills the command; failures are raised. It keeps none
        of the output it handed over unless ``max_retained_bytes`` asks it to (the result's output is then empty)."""
        check_options(options, ExecOptions, "exec_stream()")
        encoding = _checked_encoding(options.get("encoding", self._encoding))
        handle = await self._exec_handle(command, options, options.get("max_retained_bytes", 0), iterated=True)
        now = _now
        try:
            yield ExecEvent(type="start", timestamp=now(), command=handle.info.command_line if handle.info else "", process_id=handle.process_id)
            decoder = StreamDecoder(encoding)
            async for chunk in handle:
                yield ExecEvent(type=chunk.stream, timestamp=now(), data=chunk.data, text=decoder.decode(chunk.stream, chunk.data))
            streams: tuple[StreamName, ...] = ("stdout", "stderr")
            for stream in streams:
                rest = decoder.flush(stream)
                if rest:
                    yield ExecEvent(type=stream, timestamp=now(), text=rest)
            result = await handle.wait()
            yield ExecEvent(type="complete", timestamp=now(), exit_code=result.exit_code, result=result)
        finally:
            await handle._stop(SandboxError("the command was cancelled", code="CANCELLED"))

    async def start_process(self, command: Command, **options: Unpack[ProcessOptions]) -> AsyncCommandHandle:
        """Starts a background process (the Cloudflare Sandbox SDK) and returns its live, resumable handle, which follows the process
        when first iterated or waited on. It has no time limit unless ``timeout`` is given. A live duplicate
        ``process_id`` is ProcessAlreadyExistsError; ``async with`` the handle kills it on leaving the block."""
        check_options(options, ProcessOptions, "start_process()")
        rpc = self._running_rpc()
        stdin = options.get("stdin")
        spec, encoding = self._spec(
            command,
            options,
            timeout=options.get("timeout"),
            # Chosen here when not given, so a start cancelled before its answer can still name the process.
            process_id=options.get("process_id") or str(uuid.uuid4()),
            stdin_data=None if isinstance(stdin, bool) else stdin,
            stdin_open=stdin is True,
            auto_cleanup=options.get("auto_cleanup"),
        )
        try:
            response = await rpc.start_process(pb.StartProcessRequest(spec=spec), metadata=rpc.metadata)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.CANCELLED:
                # The call cancelled under it (the channel's view of a task cancel): the same as below.
                await _kill_unclaimed(rpc, spec.process_id)
            raise from_rpc_error(error, process_id=options.get("process_id")) from error
        except asyncio.CancelledError:
            # Cancelled (a task cancel, Ctrl-C in the sync API) while the daemon may already have started it: the
            # caller never gets its handle, so nothing else could stop it.
            await _kill_unclaimed(rpc, spec.process_id)
            raise
        handle = AsyncCommandHandle._for_process(
            self._context(), ProcessInfo.from_proto(response.process), max_retained_bytes=options.get("max_retained_bytes"), encoding=encoding
        )
        return self._track(handle)

    # Internals shared with AsyncProcesses.

    async def wait_for_port(
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
        """Waits until ``port`` answers inside the sandbox, checked by the daemon from there (HTTP 200-399 on ``path``
        by default, ``mode="tcp"`` a connection; see AsyncCommandHandle.wait_for_port). With ``process_id`` the wait
        is tied to that process: its exit raises :class:`~sandboxd.ProcessExitedBeforeReadyError` at once."""
        return await readiness.wait_for_port(
            self._running_rpc(),
            port,
            process_id=process_id,
            timeout=timeout,
            mode=mode,
            path=path,
            status=status,
            host=host,
            interval=interval,
        )

    async def list_ports(self, *, process_id: str | None = None) -> list[ListeningPort]:
        """The TCP ports listening inside the sandbox, lowest first, each with the pid and program holding it and,
        when it is one of the sandbox's processes or started by one, that process's id: so the port a dev server
        actually took is found. ``process_id`` lists that process's ports only."""
        return await readiness.list_ports(self._running_rpc(), process_id=process_id)

    async def _exec_handle(
        self, command: Command, options: ExecOptions, max_retained_bytes: float, *, iterated: bool = False
    ) -> AsyncCommandHandle:
        context = self._context()
        spec, encoding = self._spec(command, options, timeout=options.get("timeout", self._defaults.timeout), stdin_data=options.get("stdin"))
        request = pb.ExecRequest(spec=spec)
        return await AsyncCommandHandle._run_exec(context, request, encoding, max_retained_bytes, iterated=iterated)

    def _spec(self, command: Command, options: ExecOptions | ProcessOptions, **specific: Any) -> tuple[pb.ProcessSpec, str]:
        """The ProcessSpec and output encoding of a command, from the options Exec and StartProcess share plus
        ``specific`` ones (build_spec's keywords); notes its session as one of this sandbox's."""
        session_id = options.get("session_id")
        spec = build_spec(
            command,
            defaults=self._defaults,
            env=options.get("env"),
            cwd=options.get("cwd"),
            pty=options.get("pty", False),
            sudo=options.get("sudo", False),
            session_id=session_id,
            limits=options.get("limits"),
            retention=options.get("retention"),
            **specific,
        )
        encoding = _checked_encoding(options.get("encoding", self._encoding))
        if session_id is not None:
            self._sessions.add(session_id)
        return spec, encoding

    def _running_rpc(self) -> SandboxRpc:
        self._lifecycle.assert_running()
        assert self._rpc is not None
        return self._rpc

    def _context(self) -> HandleContext:
        return HandleContext(rpc=self._running_rpc(), reconnect=self._options.get("reconnect", ReconnectPolicy()), encoding=self._encoding)

    def _track(self, handle: AsyncCommandHandle) -> AsyncCommandHandle:
        self._handles.add(handle)
        return handle

    async def _release(self) -> None:
        for handle in list(self._handles):
            await handle.detach()
        self._handles.clear()
        rpc, self._rpc = self._rpc, None
        if rpc is not None:
            await rpc.channel.close()


class AsyncProcesses:
    """AsyncProcesses manages a sandbox's processes (the Cloudflare Sandbox SDK): ``sandbox.processes.list()``, ``get``, ``attach``,
    ``kill``, ``kill_all``, ``cleanup``, ``logs``. ``kill_all`` and ``cleanup`` act on the sandbox's sessions;
    ``list`` too unless ``all=True``; the others take any process id."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def list(self, *, all: bool = False, status: Iterable[ProcessStatus | str] | None = None) -> list[AsyncCommandHandle]:  # noqa: A002
        """Lists processes as handles, oldest first, exited ones included: this sandbox's sessions, or with ``all``
        every process the daemon keeps, of every session (as ``all`` means in the TypeScript client and ``sandbox ps
        -a``); only those in one of ``status`` when given."""
        sandbox = self._sandbox
        rpc = sandbox._running_rpc()
        statuses = [ProcessStatus(value).to_proto() for value in (status or ())]
        sessions = [""] if all else sorted(sandbox._sessions)
        infos: list[ProcessInfo] = []
        for session_id in sessions:
            # Every page: the daemon answers at most 1000 records at a time.
            page_token = ""
            while True:
                request = pb.ListProcessesRequest(session_id=session_id, statuses=statuses, page_token=page_token)
                try:
                    response = await rpc.list_processes(request, metadata=rpc.metadata)
                except grpc.aio.AioRpcError as error:
                    raise from_rpc_error(error) from error
                infos.extend(ProcessInfo.from_proto(info) for info in response.processes)
                page_token = response.next_page_token
                if not page_token:
                    break
        infos.sort(key=lambda info: info.started_at)
        context = sandbox._context()
        return [sandbox._track(AsyncCommandHandle._for_process(context, info)) for info in infos]

    async def get(self, process_id: str) -> AsyncCommandHandle | None:
        """A handle of any process on the daemon by id, or None when the daemon knows none."""
        try:
            return await self.attach(process_id)
        except SandboxError as error:
            if error.status_code == grpc.StatusCode.NOT_FOUND:
                return None
            raise

    async def attach(self, process_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0) -> AsyncCommandHandle:
        """A handle of a process whose stream starts at the given offsets (by default everything the daemon
        retains): to resume a process this client (or another) was following. ProcessNotFoundError when unknown."""
        sandbox = self._sandbox
        rpc = sandbox._running_rpc()
        try:
            response = await rpc.get_process(pb.GetProcessRequest(process_id=process_id), metadata=rpc.metadata)
        except grpc.aio.AioRpcError as error:
            raise from_rpc_error(error, process_id=process_id) from error
        info = ProcessInfo.from_proto(response.process)
        offsets: dict[StreamName, int] = {"stdout": stdout_offset, "stderr": stderr_offset}
        return sandbox._track(AsyncCommandHandle._for_process(sandbox._context(), info, offsets=offsets))

    async def kill(self, process_id: str, signal: str | int = "SIGTERM", *, grace_period: float | None = None) -> None:
        """Signals a process's group (SIGTERM by default; the daemon escalates to SIGKILL after ``grace_period``
        seconds, 5 by default). ProcessNotFoundError when unknown."""
        rpc = self._sandbox._running_rpc()
        request = pb.KillProcessRequest(process_id=process_id, signal=signal_name(signal), grace_period_ms=grace_ms(grace_period))
        try:
            await rpc.kill_process(request, metadata=rpc.metadata)
        except grpc.aio.AioRpcError as error:
            raise from_rpc_error(error, process_id=process_id) from error

    async def kill_all(self, signal: str | int = "SIGTERM", *, grace_period: float | None = None) -> int:
        """Signals every live process of this sandbox's sessions; returns how many."""
        rpc = self._sandbox._running_rpc()
        killed = 0
        for session_id in sorted(self._sandbox._sessions):
            request = pb.KillAllProcessesRequest(session_id=session_id, signal=signal_name(signal), grace_period_ms=grace_ms(grace_period))
            try:
                killed += (await rpc.kill_all_processes(request, metadata=rpc.metadata)).killed_count
            except grpc.aio.AioRpcError as error:
                raise from_rpc_error(error) from error
        return killed

    async def cleanup(self) -> int:
        """Removes the records of exited processes of this sandbox's sessions; returns how many."""
        rpc = self._sandbox._running_rpc()
        removed = 0
        for session_id in sorted(self._sandbox._sessions):
            try:
                removed += (await rpc.cleanup_processes(pb.CleanupProcessesRequest(session_id=session_id), metadata=rpc.metadata)).removed_count
            except grpc.aio.AioRpcError as error:
                raise from_rpc_error(error) from error
        return removed

    async def logs(self, process_id: str) -> ProcessLogs:
        """The output the daemon retains for a process (a snapshot). ProcessNotFoundError when unknown."""
        return await fetch_logs(self._sandbox._context(), process_id, self._sandbox._encoding)


def _checked_encoding(encoding: str) -> str:
    try:
        codecs.lookup(encoding)
    except LookupError as error:
        raise InvalidArgumentError(f"unknown encoding: {encoding}") from error
    return encoding


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def _kill_unclaimed(rpc: SandboxRpc, process_id: str) -> None:
    """SIGKILLs a process whose start was cancelled, if the daemon started it; never raises (best effort, 5 s)."""
    request = pb.KillProcessRequest(process_id=process_id, signal="SIGKILL")
    try:
        await asyncio.wait_for(rpc.kill_process(request, metadata=rpc.metadata), timeout=5)
    except (grpc.aio.AioRpcError, asyncio.TimeoutError, asyncio.CancelledError):
        pass
