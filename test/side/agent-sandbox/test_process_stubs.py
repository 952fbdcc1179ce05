"""The ProcessService stubs the agent-sandbox SDK generated and ships, on the channel it opens itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, text_format
from k8s_agent_sandbox.sandbox import Sandbox
from k8s_agent_sandbox.commands._process_stubs import process_pb2, process_pb2_grpc

from conftest import REPOSITORY
from support import sleep_marker, sleepers, wait_for


@pytest.fixture()
def stub(sandbox: Sandbox) -> process_pb2_grpc.ProcessServiceStub:
    sandbox.connector.connect()
    return process_pb2_grpc.ProcessServiceStub(sandbox.connector.grpc_channel())


class Started:
    """A Start stream read event by event."""

    def __init__(self, stub: process_pb2_grpc.ProcessServiceStub, request: Any, timeout: float = 60) -> None:
        self.call = stub.Start(request, timeout=timeout)
        self.events: Iterator[Any] = iter(self.call)

    def init(self) -> int:
        event = next(self.events)
        assert event.WhichOneof("event") == "init"
        return int(event.init.process_id)

    def stdout_until(self, text: bytes) -> bytes:
        seen = b""
        while text not in seen:
            event = next(self.events)
            assert event.WhichOneof("event") in ("stdout", "stderr")
            seen += event.stdout
        return seen

    def drain(self) -> tuple[bytes, bytes, int]:
        stdout, stderr = b"", b""
        for event in self.events:
            kind = event.WhichOneof("event")
            if kind == "stdout":
                stdout += event.stdout
            elif kind == "stderr":
                stderr += event.stderr
            elif kind == "exit":
                assert next(self.events, None) is None, "an event after exit"
                return stdout, stderr, int(event.exit.exit_code)
            else:
                raise AssertionError(f"unexpected {kind} event")
        raise AssertionError("the stream ended without an exit event")


def config(*command: str, **kwargs: Any) -> Any:
    return process_pb2.ProcessConfig(command=list(command), **kwargs)


def code_of(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code()  # type: ignore[no-any-return, attr-defined]


def test_the_sdks_stubs_describe_the_process_v1_this_daemon_serves() -> None:
    shipped = descriptor_pb2.FileDescriptorProto.FromString(process_pb2.DESCRIPTOR.serialized_pb)
    image = descriptor_pb2.FileDescriptorSet.FromString((Path(REPOSITORY) / "proto/baseline/process-v1.binpb").read_bytes())
    ours = next(file for file in image.file if file.name == "process/v1/process.proto")
    # The SDK generates with buf's managed mode, which rewrites per-language file options (java_package...).
    shipped.ClearField("options")
    ours.ClearField("options")
    # Compared as text: every field of both (names, numbers, types, labels, oneofs, services), and nothing else.
    assert text_format.MessageToString(shipped) == text_format.MessageToString(ours)


def test_start_streams_init_output_and_exit(stub: process_pb2_grpc.ProcessServiceStub) -> None:
    started = Started(stub, process_pb2.StartRequest(config=config("sh", "-c", "echo out; echo err >&2; exit 7")))
    pid = started.init()
    assert pid > 0
    assert started.drain() == (b"out\n", b"err\n", 7)


def test_execute_answers_binary_output_byte_for_byte(stub: process_pb2_grpc.ProcessServiceStub) -> None:
    every_byte = bytes(range(256))
    response = stub.Execute(process_pb2.ExecuteRequest(config=config("printf", "".join(f"\\{byte:03o}" for byte in every_byte))), timeout=60)
    assert (response.exit_code, response.stdout, response.stderr) == (0, every_byte, b"")


def test_execute_says_in_trailers_how_much_output_it_dropped(stub: process_pb2_grpc.ProcessServiceStub) -> None:
    response, call = stub.Execute.with_call(process_pb2.ExecuteRequest(config=config("head", "-c", "10000000", "/dev/zero")), timeout=60)
    trailers = dict(call.trailing_metadata())
    kept = 4 * 1024 * 1024 - 64 * 1024
    assert response.stdout == bytes(kept)
    assert (trailers["sandboxd-stdout-dropped-bytes"], trailers["sandboxd-stderr-dropped-bytes"]) == (str(10_000_000 - kept), "0")


def test_write_stdin_feeds_input_and_eof_ends_it(stub: process_pb2_grpc.ProcessServiceStub) -> None:
    started = Started(stub, process_pb2.StartRequest(config=config("cat")))
    pid = started.init()
    stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, input=b"piped-\x00\xff"), timeout=30)
    stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, input=b"through"), timeout=30)
    stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, eof={}), timeout=30)
    assert started.drain() == (b"piped-\x00\xffthrough", b"", 0)
    # Gone once it exited: unknown to WriteStdin.
    assert code_of(lambda: stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, input=b"x"), timeout=30)) == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(("signal", "number"), [(process_pb2.SIGNAL_SIGTERM, 15), (process_pb2.SIGNAL_SIGINT, 2), (process_pb2.SIGNAL_SIGKILL, 9)])
def test_send_signal_reaches_the_whole_group(stub: process_pb2_grpc.ProcessServiceStub, signal: int, number: int) -> None:
    marker = sleep_marker()
    started = Started(stub, process_pb2.StartRequest(config=config("sh", "-c", f"trap - INT; sleep {marker} & sleep {marker}; wait")))
    pid = started.init()
    wait_for(lambda: len(sleepers(marker)) == 2, "both sleepers to run")
    stub.SendSignal(process_pb2.SendSignalRequest(process_id=pid, signal=signal), timeout=30)
    assert started.drain()[2] == 128 + number
    wait_for(lambda: sleepers(marker) == [], "the group to be gone")


def test_resize_tty_resizes_the_pty(stub: process_pb2_grpc.ProcessServiceStub) -> None:
    request = process_pb2.StartRequest(config=config("sh", "-c", "stty size; read line; stty size"), pty=process_pb2.PTY(cols=100, rows=30))
    started = Started(stub, request)
    pid = started.init()
    started.stdout_until(b"30 100")
    stub.ResizeTTY(process_pb2.ResizeTTYRequest(process_id=pid, cols=132, rows=43), timeout=30)
    stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, input=b"go\r"), timeout=30)
    stdout, _, exit_code = started.drain()
    assert b"43 132" in stdout and exit_code == 0


def test_every_error_path_has_the_kep_status_code(stub: process_pb2_grpc.ProcessServiceStub) -> None:
    unknown = 2_000_000_000
    assert code_of(lambda: stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=unknown, input=b"x"), timeout=30)) == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=unknown, eof={}), timeout=30)) == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: stub.SendSignal(process_pb2.SendSignalRequest(process_id=unknown, signal=process_pb2.SIGNAL_SIGTERM), timeout=30)) == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: stub.ResizeTTY(process_pb2.ResizeTTYRequest(process_id=unknown, cols=80, rows=24), timeout=30)) == grpc.StatusCode.NOT_FOUND
    for cwd in ("../..", "/", "/etc"):
        assert code_of(lambda: stub.Execute(process_pb2.ExecuteRequest(config=config("pwd", cwd=cwd)), timeout=30)) == grpc.StatusCode.PERMISSION_DENIED
        assert code_of(lambda: list(stub.Start(process_pb2.StartRequest(config=config("pwd", cwd=cwd)), timeout=30))) == grpc.StatusCode.PERMISSION_DENIED
    assert code_of(lambda: stub.Execute(process_pb2.ExecuteRequest(config=config()), timeout=30)) == grpc.StatusCode.INVALID_ARGUMENT

    started = Started(stub, process_pb2.StartRequest(config=config("cat")))
    pid = started.init()
    assert code_of(lambda: stub.ResizeTTY(process_pb2.ResizeTTYRequest(process_id=pid, cols=80, rows=24), timeout=30)) == grpc.StatusCode.FAILED_PRECONDITION
    assert code_of(lambda: stub.SendSignal(process_pb2.SendSignalRequest(process_id=pid), timeout=30)) == grpc.StatusCode.INVALID_ARGUMENT
    stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, eof={}), timeout=30)
    assert started.drain() == (b"", b"", 0)


def test_a_deadline_kills_the_whole_group(stub: process_pb2_grpc.ProcessServiceStub) -> None:
    marker = sleep_marker()
    request = process_pb2.ExecuteRequest(config=config("sh", "-c", f"sleep {marker} & sleep {marker}; wait"))
    assert code_of(lambda: stub.Execute(request, timeout=1.5)) == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(lambda: sleepers(marker) == [], "the group to be killed at the deadline")
    started = Started(stub, process_pb2.StartRequest(config=config("sh", "-c", f"sleep {marker} & sleep {marker}; wait")), timeout=1.5)
    started.init()
    assert code_of(started.drain) == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(lambda: sleepers(marker) == [], "the group to be killed at the deadline")
