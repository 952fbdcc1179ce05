"""Typed exceptions: the daemon's refusals by ErrorInfo reason (or status code), connection failures, client checks."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

import sandboxd
from sandboxd import Sandbox
from sandboxd.errors import from_rpc_error

from .support import REPOSITORY, Daemon, sleep_marker, sleepers, wait_for

#: Whether the contract lists the error reasons: from then on the daemon must attach them (the agreed contract),
#: and these tests check them exactly; before, they check the classes chosen by status code.
REASONS = "enum ErrorReason" in (REPOSITORY / "proto/sandbox/v1/sandbox.proto").read_text()


def expect_reason(error: sandboxd.SandboxError, reason: str, **metadata: str) -> None:
    """The daemon's ErrorInfo, when the contract has reasons; none before."""
    if not REASONS:
        assert error.reason is None
        return
    assert error.reason == reason
    for key, value in metadata.items():
        assert error.metadata.get(key) == value, error.metadata


@pytest.fixture(scope="module")
def limited() -> Iterator[Daemon]:
    """A daemon without a token that allows one live process."""
    started = Daemon("--max-processes", "1")
    yield started
    started.close()


def test_a_missing_or_wrong_token_is_an_authentication_error(daemon: Daemon) -> None:
    for token in (None, "wrong-token"):
        with pytest.raises(sandboxd.AuthenticationError) as refused:
            if token is None:
                sandboxd.connect(daemon.url)
            else:
                sandboxd.connect(daemon.url, token=token)
        assert refused.value.code == "UNAUTHENTICATED"
        expect_reason(refused.value, "UNAUTHENTICATED")


def test_an_unreachable_daemon_is_unavailable_and_a_bad_url_invalid() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    sandbox = sandboxd.Sandbox(f"http://127.0.0.1:{port}", connect_timeout=5)
    with pytest.raises(sandboxd.SandboxUnavailableError) as unreachable:
        sandbox.start()
    assert isinstance(unreachable.value, ConnectionError) and sandbox.status == sandboxd.SandboxStatus.INIT
    with pytest.raises(sandboxd.InvalidArgumentError):
        sandboxd.Sandbox("ftp://127.0.0.1:1").start()


def test_a_cwd_outside_the_workspace_is_permission_denied(sandbox: Sandbox, daemon: Daemon) -> None:
    with sandboxd.connect(daemon.url, token=daemon.token or "") as unconfined:
        with pytest.raises(sandboxd.PermissionDeniedError) as denied:
            unconfined.exec("true", cwd="/")
    assert denied.value.code == "PERMISSION_DENIED"
    if REASONS:
        assert isinstance(denied.value, sandboxd.CwdOutsideWorkspaceError)
    expect_reason(denied.value, "CWD_OUTSIDE_WORKSPACE")


def test_sudo_without_allow_sudo_is_permission_denied(sandbox: Sandbox) -> None:
    with pytest.raises(sandboxd.PermissionDeniedError) as denied:
        sandbox.exec("id -u", sudo=True)
    if REASONS:
        assert isinstance(denied.value, sandboxd.SudoNotAllowedError)
    expect_reason(denied.value, "SUDO_NOT_ALLOWED")


def test_input_to_an_exited_process_or_one_without_stdin_is_a_failed_precondition(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    no_stdin = sandbox.start_process(f"sleep {marker}")
    with pytest.raises(sandboxd.FailedPreconditionError) as not_open:
        no_stdin.send_input("x")
    expect_reason(not_open.value, "STDIN_NOT_OPEN")
    no_stdin.kill("SIGKILL")
    no_stdin.wait()
    exited = sandbox.start_process("cat", stdin=True)
    exited.close_input()
    assert exited.wait().exit_code == 0
    with pytest.raises(sandboxd.FailedPreconditionError) as not_running:
        exited.send_input("late")
    expect_reason(not_running.value, "PROCESS_NOT_RUNNING")


def test_an_unknown_process_carries_its_reason(sandbox: Sandbox) -> None:
    with pytest.raises(sandboxd.ProcessNotFoundError) as missing:
        sandbox.processes.kill("no-such-process")
    expect_reason(missing.value, "PROCESS_NOT_FOUND", process_id="no-such-process")


def test_a_limit_is_limit_exceeded(limited: Daemon) -> None:
    marker = sleep_marker()
    with sandboxd.connect(limited.url) as sandbox:
        sandbox.start_process(f"sleep {marker}")
        with pytest.raises(sandboxd.LimitExceededError) as refused:
            sandbox.exec("true")
        assert refused.value.code == "RESOURCE_EXHAUSTED"
        expect_reason(refused.value, "LIMIT_EXCEEDED", limit="max-processes")
        if REASONS:
            assert refused.value.limit == "max-processes"
        sandbox.close(kill_processes=True)
    wait_for(lambda: not sleepers(marker), what="close(kill_processes=True) to kill the sleep")


def test_an_exec_cut_by_a_daemon_shutting_down_is_unavailable_never_an_invented_exit() -> None:
    own = Daemon()
    marker = sleep_marker()

    def shut_down() -> None:
        wait_for(lambda: bool(sleepers(marker)), what="the sleep")
        own.close()

    try:
        with sandboxd.connect(own.url) as sandbox:
            threading.Thread(target=shut_down, daemon=True).start()
            with pytest.raises(sandboxd.SandboxUnavailableError):
                sandbox.exec(f"sleep {marker}")
    finally:
        own.close()
    wait_for(lambda: not sleepers(marker), what="the daemon's shutdown to kill the sleep")


def _aio_error(code: grpc.StatusCode, message: str, details: list[any_pb2.Any]) -> grpc.aio.AioRpcError:
    status = status_pb2.Status(code=code.value[0], message=message, details=details)
    trailers = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, message)


def _packed(reason: str, domain: str = "sandbox.v1", **metadata: str) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata))
    return packed


def test_the_class_follows_the_error_info_reason_then_the_code() -> None:
    # The mapping itself, on the bytes a daemon sends in grpc-status-details-bin (end to end above).
    limit = from_rpc_error(_aio_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many", [_packed("LIMIT_EXCEEDED", limit="max-processes", value="1")]))
    assert isinstance(limit, sandboxd.LimitExceededError)
    assert (limit.reason, limit.limit, limit.value, limit.code, limit.message) == ("LIMIT_EXCEEDED", "max-processes", "1", "RESOURCE_EXHAUSTED", "too many")
    cwd = from_rpc_error(_aio_error(grpc.StatusCode.PERMISSION_DENIED, "no", [_packed("OTHER", domain="x"), _packed("CWD_OUTSIDE_WORKSPACE", cwd="/")]))
    assert isinstance(cwd, sandboxd.CwdOutsideWorkspaceError) and cwd.cwd == "/"
    spawn = from_rpc_error(_aio_error(grpc.StatusCode.NOT_FOUND, "no program", [_packed("SPAWN_FAILED", errno="ENOENT")]))
    assert isinstance(spawn, sandboxd.SpawnFailedError) and spawn.errno == "ENOENT"
    # An unknown reason is treated generically, by its code.
    unknown = from_rpc_error(_aio_error(grpc.StatusCode.PERMISSION_DENIED, "no", [_packed("SOMETHING_NEW")]))
    assert type(unknown) is sandboxd.PermissionDeniedError and unknown.reason == "SOMETHING_NEW"
    # A status detail whose message differs from grpc-message (grpcio-status rejects it) is still read.
    status = status_pb2.Status(code=5, message="other text", details=[_packed("PROCESS_NOT_FOUND", process_id="p1")])
    mismatched = grpc.aio.AioRpcError(
        grpc.StatusCode.NOT_FOUND, grpc.aio.Metadata(), grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString())), "text"
    )
    found = from_rpc_error(mismatched)
    assert isinstance(found, sandboxd.ProcessNotFoundError) and found.process_id == "p1"
    # No details at all: the status code decides.
    plain = from_rpc_error(grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone"))
    assert type(plain) is sandboxd.SandboxUnavailableError and plain.reason is None
    deadline = from_rpc_error(grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata(), "late"), timeout=2.0)
    assert isinstance(deadline, sandboxd.ExecutionTimeoutError) and deadline.timeout == 2.0


def test_a_missing_cwd_and_a_resize_without_a_pty_are_failed_preconditions(sandbox: Sandbox) -> None:
    with pytest.raises(sandboxd.CwdNotFoundError) as missing:
        sandbox.exec("true", cwd="no-such-directory")
    assert missing.value.code == "FAILED_PRECONDITION" and missing.value.cwd is not None
    expect_reason(missing.value, "CWD_NOT_FOUND")
    handle = sandbox.start_process("cat", stdin=True)
    with pytest.raises(sandboxd.PtyNotOpenError) as no_pty:
        handle.resize(100, 30)
    expect_reason(no_pty.value, "PTY_NOT_OPEN", process_id=handle.process_id)
    handle.close_input()
    assert handle.wait().exit_code == 0
