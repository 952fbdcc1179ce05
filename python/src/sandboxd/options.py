"""The options of running a command: one TypedDict per idea, shared by the sync and the asyncio API."""

from __future__ import annotations

import difflib
import math
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from .errors import InvalidArgumentError, UnknownOptionError

#: A command: a shell command line (run by ``/bin/sh -c``: pipes, globs and redirections work), or an argv
#: sequence (the program, looked up in PATH, then its arguments; no shell involved).
Command = str | Sequence[str]


class PtySize(TypedDict, total=False):
    """Size and terminal type of a pseudo-terminal."""

    #: Columns; 80 by default.
    cols: int
    #: Rows; 24 by default.
    rows: int
    #: TERM; ``xterm-256color`` by default.
    term: str


class ResourceLimits(TypedDict, total=False):
    """Resource limits of one command alone (its whole process tree), enforced by the daemon in cgroups of its own.

    Unset fields take the daemon's defaults. Above a daemon cap the call fails with InvalidArgumentError (reason
    ``LIMIT_ABOVE_CAP``, naming the cap); where the daemon cannot enforce one, ``LIMIT_NOT_ENFORCEABLE``.
    """

    #: Most memory of its processes together, in bytes; past it the kernel kills one of them.
    memory_bytes: int
    #: CPU it may use, in CPUs (0.5 = half a CPU), as a quota: throttled past it, never killed.
    cpus: float
    #: Its share of the CPU against other commands, 1 to 10000 (100 = every command's default).
    cpu_weight: int
    #: Most tasks (processes and threads) at once; a fork past it fails.
    max_tasks: int


class Retention(TypedDict, total=False):
    """How much of a command's output the daemon keeps for later readers (``logs()``, ``get_process_logs()``):
    the first ``head_bytes`` of each stream and the last ``tail_bytes`` of both, with one gap between.

    Unset fields take the daemon's defaults (a 64 KiB head, the tail the rest of its ``--max-output-bytes``); more than
    that cap in all fails with InvalidArgumentError (reason ``RETENTION_ABOVE_LIMIT``).
    """

    #: Bytes kept from the start of each stream, stdout and stderr each.
    head_bytes: int
    #: Bytes kept from the end of the output, both streams together.
    tail_bytes: int


class ExecOptions(TypedDict, total=False):
    """Options of ``exec()`` and ``exec_stream()``: a command run to its end through the Exec call."""

    #: Environment variables added to the daemon's clean base environment.
    env: Mapping[str, str]
    #: Working directory: relative to the sandbox's first workspace directory, or absolute inside one.
    cwd: str
    #: Time limit in seconds; on expiry the daemon SIGKILLs the process group and the result has ``timed_out`` set
    #: and exit code 137. The sandbox's ``timeout`` (30 s by default) when absent; None or 0 for none.
    timeout: float | None
    #: Text (as UTF-8) or bytes written to the command's stdin, which is then closed.
    stdin: str | bytes
    #: Run in a pseudo-terminal (True for 80x24, or a size). The kernel merges stderr into stdout for a PTY.
    pty: bool | PtySize
    #: Run as root; refused (SudoNotAllowedError) unless the daemon allows it.
    sudo: bool
    #: Resource limits of this command alone (memory, CPU, tasks), within the daemon's caps.
    limits: ResourceLimits
    #: How much of the output the daemon keeps for later readers: the head of each stream and the tail.
    retention: Retention
    #: Session for grouping, listing and killing; the sandbox's own session by default.
    session_id: str
    #: Encoding of the ``.text`` helpers and text events; the sandbox's (UTF-8) by default.
    encoding: str
    #: Most output bytes (both streams together, the newest) kept for the result. ``exec()`` keeps everything by
    #: default (the result is the point); ``exec_stream()`` keeps nothing by default, so its memory stays flat
    #: however much the command prints and its ``complete`` event's result has empty output: pass ``math.inf`` to
    #: keep it all there too.
    max_retained_bytes: float


class ProcessOptions(TypedDict, total=False):
    """Options of ``start_process()``: a background process that outlives the call and is followed by its handle."""

    #: Environment variables added to the daemon's clean base environment.
    env: Mapping[str, str]
    #: Working directory, as in ExecOptions.
    cwd: str
    #: Time limit in seconds, as in ExecOptions; none when absent.
    timeout: float | None
    #: True keeps a stdin pipe open for ``send_input()``; text or bytes are written at start and stdin then closed.
    stdin: bool | str | bytes
    #: Run in a pseudo-terminal (True for 80x24, or a size).
    pty: bool | PtySize
    #: Run as root; refused unless the daemon allows it.
    sudo: bool
    #: Resource limits of this command alone, as in ExecOptions.
    limits: ResourceLimits
    #: How much of the output the daemon keeps, as in ExecOptions.
    retention: Retention
    #: Client-chosen process id; a UUID when absent. A live duplicate is ProcessAlreadyExistsError.
    process_id: str
    #: Session id; the sandbox's by default.
    session_id: str
    #: Remove the record automatically once the process has exited and lingered (default True).
    auto_cleanup: bool
    #: Encoding of the ``.text`` helpers; the sandbox's by default.
    encoding: str
    #: Most output bytes the handle keeps for its result; 16 MiB by default (see CommandResult.truncated).
    max_retained_bytes: int


@dataclass(frozen=True, slots=True)
class SpecDefaults:
    """What a sandbox adds to every command."""

    #: The sandbox's session id.
    session_id: str
    #: Default time limit of waiting commands in seconds (None: none).
    timeout: float | None
    #: Allowed workspace directories; the first is the default working directory.
    workspace: tuple[str, ...]


def build_spec(
    command: Command,
    *,
    defaults: SpecDefaults,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
    pty: bool | PtySize = False,
    sudo: bool = False,
    session_id: str | None = None,
    process_id: str | None = None,
    stdin_data: str | bytes | None = None,
    stdin_open: bool = False,
    auto_cleanup: bool | None = None,
    limits: ResourceLimits | None = None,
    retention: Retention | None = None,
) -> pb.ProcessSpec:
    """Builds the ProcessSpec of one command; an invalid option is an InvalidArgumentError before any call."""
    program, args = split_command(command)
    spec = pb.ProcessSpec(
        command=program,
        args=args,
        env=dict(env or {}),
        cwd=resolve_cwd(cwd, defaults.workspace),
        timeout_ms=timeout_ms(timeout),
        process_id=process_id or "",
        session_id=session_id if session_id is not None else defaults.session_id,
        stdin=stdin_open,
        stdin_data=stdin_data.encode() if isinstance(stdin_data, str) else (stdin_data or b""),
        sudo=sudo,
    )
    if pty is not False:
        size: PtySize = {} if pty is True else pty
        spec.pty.CopyFrom(pb.PtyOptions(cols=size.get("cols", 0), rows=size.get("rows", 0), term=size.get("term", "")))
    if auto_cleanup is not None:
        spec.auto_cleanup = auto_cleanup
    if limits is not None:
        spec.limits.CopyFrom(limits_message(limits))
    if retention is not None:
        spec.retention.CopyFrom(retention_message(retention))
    return spec


def retention_message(retention: Retention) -> pb.OutputRetention:
    """The OutputRetention message of a command's retention; a value of the wrong shape is an InvalidArgumentError."""
    check_options(retention, Retention, "retention")
    message = pb.OutputRetention()
    for name in ("head_bytes", "tail_bytes"):
        if name in retention:
            value = retention.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"invalid retention.{name}: {value!r} (a whole number of bytes)")
            setattr(message, name, value)
    return message


def limits_message(limits: ResourceLimits) -> pb.ResourceLimits:
    """The ResourceLimits message of a command's limits; a value of the wrong shape is an InvalidArgumentError."""
    check_options(limits, ResourceLimits, "limits")
    message = pb.ResourceLimits()

    def whole(name: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"invalid limits.{name}: {value!r} (a whole number of at least 1)")
        return value

    if "memory_bytes" in limits:
        message.memory_bytes = whole("memory_bytes", limits["memory_bytes"])
    if "cpus" in limits:
        cpus = limits["cpus"]
        if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or math.isnan(cpus) or cpus <= 0:
            raise InvalidArgumentError(f"invalid limits.cpus: {cpus!r} (a positive number of CPUs)")
        message.cpu_millis = max(1, round(cpus * 1000))
    if "cpu_weight" in limits:
        message.cpu_weight = whole("cpu_weight", limits["cpu_weight"])
    if "max_tasks" in limits:
        message.max_tasks = whole("max_tasks", limits["max_tasks"])
    return message


def split_command(command: Command) -> tuple[str, list[str]]:
    """Splits a command into the spec's ``command`` and ``args``.

    A string is a shell command line. An argv sequence runs its program directly; one without arguments is sent as
    its shell-quoted name, since a spec without ``args`` is a command line (so ``["ls"]`` runs exactly ``ls``).
    """
    if isinstance(command, str):
        return command, []
    argv = list(command)
    if not argv or not all(isinstance(part, str) for part in argv):
        raise InvalidArgumentError(f"invalid command: {command!r} (a command line or a non-empty list of strings)")
    if len(argv) == 1:
        return shlex.quote(argv[0]), []
    return argv[0], argv[1:]


def timeout_ms(timeout: float | None) -> int:
    """A time limit in seconds as the spec's milliseconds (0 for none); a negative or NaN one is refused."""
    if timeout is None or timeout == 0:
        return 0
    if not isinstance(timeout, (int, float)) or math.isnan(timeout) or timeout < 0:
        raise InvalidArgumentError(f"invalid timeout: {timeout!r} (seconds, 0 or None for none)")
    return min(math.ceil(timeout * 1000), 2**31 - 1)


def resolve_cwd(cwd: str | None, workspace: Sequence[str]) -> str:
    """Resolves a working directory against the workspace: relative paths from its first directory, and an absolute
    one must lie inside one of them (InvalidArgumentError otherwise). Without a workspace the path goes to the daemon
    as given; the daemon confines it to its own roots either way.
    """
    if not workspace:
        return cwd or ""
    resolved = posixpath.normpath(posixpath.join(workspace[0], cwd or "."))
    for root in workspace:
        relative = posixpath.relpath(resolved, posixpath.normpath(root))
        if relative == "." or not relative.startswith(".."):
            return resolved
    raise InvalidArgumentError(f"working directory {resolved} is outside the sandbox's workspace")


def check_options(given: Mapping[str, object], known: type, api: str) -> None:
    """Raises :class:`~sandboxd.UnknownOptionError` when ``given`` has a key the TypedDict ``known`` does not
    declare, naming the closest known option and every one ``api`` takes."""
    names: list[str] = sorted(getattr(known, "__required_keys__", frozenset()) | getattr(known, "__optional_keys__", frozenset()))
    unknown = [key for key in given if key not in names]
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.8)
        hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
    raise UnknownOptionError(f"{api}: unknown option {', '.join(hints)} (it takes {', '.join(names)})")
