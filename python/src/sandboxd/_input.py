"""One SendInput call to one process: data, end of input and PTY resizes in order, each acknowledged."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from ._transport import SandboxRpc
from .errors import SandboxError, from_rpc_error
from .output import InputAck


class InputStream:
    """InputStream is the SendInput call of one process, opened on the first message.

    Messages go one at a time (a lock keeps concurrent senders in order) and each ``send`` returns that message's
    acknowledgement. A failed call is not retried: the daemon may or may not have applied the message in flight,
    and writing it twice would duplicate input. The next ``send`` opens a new call.
    """

    def __init__(self, rpc: SandboxRpc, process_id: str) -> None:
        self._rpc = rpc
        self._process_id = process_id
        self._lock = asyncio.Lock()
        self._call: grpc.aio.StreamStreamCall[pb.SendInputRequest, pb.SendInputResponse] | None = None
        self._closed = False

    async def send(self, request: pb.SendInputRequest) -> InputAck:
        """Sends one message and returns its acknowledgement; a refusal is the matching SandboxError."""
        async with self._lock:
            if self._closed:
                raise SandboxError("the handle was detached from its command", code="DETACHED")
            try:
                call = await self._open()
                await call.write(request)
                return await self._ack(call)
            except grpc.aio.AioRpcError as error:
                self._drop()
                raise from_rpc_error(error, process_id=self._process_id) from error
            except BaseException:
                # Cancelled or failed mid-message: this call's next answer would belong to this message.
                self._drop()
                raise

    def close(self) -> None:
        """Ends the call (not the process's stdin: that is a ``close`` message); later sends are refused."""
        self._closed = True
        self._drop()

    async def _open(self) -> grpc.aio.StreamStreamCall[pb.SendInputRequest, pb.SendInputResponse]:
        if self._call is not None and not self._call.done():
            return self._call
        self._drop()
        call = self._rpc.send_input(metadata=self._rpc.metadata)
        self._call = call
        await call.write(pb.SendInputRequest(open=pb.OpenInput(process_id=self._process_id)))
        await self._ack(call)
        return call

    async def _ack(self, call: grpc.aio.StreamStreamCall[pb.SendInputRequest, pb.SendInputResponse]) -> InputAck:
        response = await call.read()
        if response is grpc.aio.EOF:
            # The daemon ended the call: its status says why (read() raises once it is known).
            await call.wait_for_connection()
            code = await call.code()
            raise SandboxError(f"the input stream ended before acknowledging the message ({code.name})", code="INPUT_CLOSED")
        assert isinstance(response, pb.SendInputResponse)
        return InputAck(bytes_written=response.bytes_written, closed=response.closed)

    def _drop(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
