"""The gRPC channel to a daemon (grpc.aio over HTTP/2, with keepalive pings) and the RPCs of sandbox.v1, typed."""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import grpc
import grpc.aio
from google.protobuf.message import Message

from ._gen.sandbox.v1 import files_pb2 as files_pb
from ._gen.sandbox.v1 import sandbox_pb2 as pb
from .errors import InvalidArgumentError

_SERVICE = "/sandbox.v1.SandboxService/"
_FILE_SERVICE = "/sandbox.v1.FileService/"

_Message = TypeVar("_Message", bound=Message)


def _serializer(message_type: type[_Message]) -> Callable[[_Message], bytes]:
    """A typed serializer of one message type (the generated SerializeToString takes any Message)."""

    def serialize(message: _Message) -> bytes:
        return message.SerializeToString()

    return serialize

#: The daemon's default address.
DEFAULT_URL = "http://127.0.0.1:7007"

#: Largest request message sent, the daemon's default ``--max-message-bytes``: raise both together.
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Keepalive:
    """Keepalive sets the HTTP/2 pings that find a dead path while calls are open.

    Every ``interval`` seconds with a call open the client pings the daemon; without an answer within ``timeout``
    seconds the connection is declared dead and its calls fail with UNAVAILABLE (a background handle then
    reconnects). So a call on a path that went silent (a peer gone without a reset, a dropped NAT entry) fails in
    about ``interval + timeout`` seconds rather than hanging forever.
    """

    #: Seconds between pings while calls are open; 20 by default.
    interval: float = 20.0
    #: Seconds to wait for a ping's answer; 10 by default.
    timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class Tls:
    """Tls holds PEM bytes for an ``https://`` daemon: the CAs to trust and, for mutual TLS, a client certificate."""

    #: CA certificates to trust; the system's roots when None.
    root_certificates: bytes | None = None
    #: The client's certificate chain, for a daemon started with ``--tls-client-ca``.
    certificate_chain: bytes | None = None
    #: The private key of ``certificate_chain``.
    private_key: bytes | None = None


#: The environment variable naming the daemon's URL when none is given; the TypeScript client and the CLI read it too.
URL_VARIABLE = "SANDBOXD_URL"

#: The environment variable holding the token when none is given: the daemon's own variable.
TOKEN_VARIABLE = "SANDBOXD_TOKEN"

_URL_FORMS = "write it as http://host:port (the daemon speaks plain HTTP by default) or https://host:port (a daemon started with --tls-cert)"


def resolve_url(url: str | None) -> str:
    """The daemon URL to use: ``url``, else ``$SANDBOXD_URL``, else :data:`DEFAULT_URL`; checked by
    :func:`channel_target`."""
    resolved = url or os.environ.get(URL_VARIABLE) or DEFAULT_URL
    channel_target(resolved)
    return resolved


def resolve_token(options: Mapping[str, object]) -> str | None:
    """The token to send: the ``token`` option when given (None or "" for none), else ``$SANDBOXD_TOKEN``."""
    token = options["token"] if "token" in options else os.environ.get(TOKEN_VARIABLE)
    return token if isinstance(token, str) and token != "" else None


def check_cleartext_token(url: str, token: str | None, allowed: bool) -> None:
    """Refuses (InvalidArgumentError) to send a token over cleartext ``http://`` to a host that is not loopback,
    unless ``allowed``: anyone on the path could read it and run commands with it."""
    parts = urlsplit(url)
    if token is None or allowed or parts.scheme != "http" or is_loopback_host(parts.hostname or ""):
        return
    raise InvalidArgumentError(
        f"refusing to send the token in clear to {url}: use https:// (a daemon started with --tls-cert and --tls-key), "
        "or allow it with allow_cleartext_token=True on a network you trust"
    )


def is_loopback_host(hostname: str) -> bool:
    """Whether ``hostname`` is the loopback interface: localhost, 127.0.0.0/8 or ::1."""
    host = hostname.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_mismatch(url: str, details: str) -> str | None:
    """Explains a failure whose text shows ``https://`` met a daemon speaking plain HTTP, or returns None."""
    parts = urlsplit(url)
    if parts.scheme == "https" and re.search(r"wrong.version.number|packet length too long", details, re.IGNORECASE):
        return f"the daemon at {url} speaks plain HTTP, not TLS: use http://{parts.netloc}, or start the daemon with --tls-cert and --tls-key"
    return None


def channel_target(url: str) -> tuple[str, bool]:
    """Splits a daemon URL into a gRPC target (``host:port``) and whether it uses TLS.

    ``http://host:port`` is cleartext HTTP/2, ``https://host:port`` TLS (port 443 when omitted). Anything else (a
    bare ``host:port`` included) is an :class:`~sandboxd.InvalidArgumentError` naming both forms, worded as the
    TypeScript client and the CLI word it.
    """
    try:
        parts = urlsplit(url)
        valid = "://" in url and parts.scheme in ("http", "https") and bool(parts.hostname) and parts.path in ("", "/")
        port = parts.port
    except ValueError:
        valid = False
    if not valid:
        raise InvalidArgumentError(f"invalid daemon URL {json.dumps(url)}: {_URL_FORMS}", code="INVALID_ARGUMENT")
    secure = parts.scheme == "https"
    port = port or (443 if secure else 80)
    hostname = parts.hostname or ""
    host = f"[{hostname}]" if ":" in hostname else hostname
    return f"{host}:{port}", secure


_RETRY_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [
                    {"service": "sandbox.v1.SandboxService", "method": method}
                    for method in (
                        "GetProcess",
                        "ListProcesses",
                        "KillProcess",
                        "KillAllProcesses",
                        "CleanupProcesses",
                        "GetProcessLogs",
                    )
                ]
                # Describing files changes nothing either; Write, MakeDir, Remove, Move and Chmod are never retried.
                + [{"service": "sandbox.v1.FileService", "method": method} for method in ("Stat", "List")],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "1s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)


def create_channel(url: str, *, keepalive: Keepalive, tls: Tls | None, max_message_bytes: int) -> grpc.aio.Channel:
    """Creates the grpc.aio channel of one daemon (bound to the running event loop)."""
    target, secure = channel_target(url)
    options: list[tuple[str, int | str]] = [
        ("grpc.keepalive_time_ms", max(1, round(keepalive.interval * 1000))),
        ("grpc.keepalive_timeout_ms", max(1, round(keepalive.timeout * 1000))),
        # Pings only while calls are open, as many as needed: the daemon (Node's HTTP/2) answers each.
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        # Any ping (keepalive or flow control) unanswered this long ends the connection; grpc-core waits 1 min.
        ("grpc.http2.ping_timeout_ms", max(1, round(keepalive.timeout * 1000))),
        # GetProcessLogs returns a process's whole retained output (8 MiB per stream by default) in one message.
        ("grpc.max_receive_message_length", -1),
        # Output comes in messages of up to 1 MiB (larger while this client lags): frames up to 4 MiB, and a 4 MiB
        # window per stream from the start (grpc-core's BDP probing widens it later, from 64 KiB), as the
        # TypeScript client asks for.
        ("grpc.http2.max_frame_size", 4 * 1024 * 1024),
        ("grpc.http2.lookahead_bytes", 4 * 1024 * 1024),
        ("grpc.max_send_message_length", max_message_bytes),
        # The handle's own reconnect policy paces retries; the channel should not add minutes of backoff to it.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
        # Calls that change nothing, or whose repeat changes nothing more, are retried on UNAVAILABLE: right after
        # a connection is lost the channel may still hand a call to the dead one (seen: "Stream removed
        # (sendmsg: Broken pipe)"). StartProcess, Exec, StreamLogs and SendInput are not: the handles own those.
        ("grpc.enable_retries", 1),
        ("grpc.service_config", _RETRY_SERVICE_CONFIG),
    ]
    if not secure:
        return grpc.aio.insecure_channel(target, options=options)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.root_certificates if tls else None,
        private_key=tls.private_key if tls else None,
        certificate_chain=tls.certificate_chain if tls else None,
    )
    return grpc.aio.secure_channel(target, credentials, options=options)


class SandboxRpc:
    """SandboxRpc is sandbox.v1's fourteen methods on one channel, each sending the same call metadata (the token).

    The methods are declared here with their messages rather than taken from grpcio-tools' service stub, which has
    no types.
    """

    def __init__(self, channel: grpc.aio.Channel, metadata: Mapping[str, str]) -> None:
        #: The channel.
        self.channel = channel
        #: Metadata sent with every call: ``authorization`` and any extra headers.
        self.metadata: tuple[tuple[str, str], ...] = tuple((key.lower(), value) for key, value in metadata.items())
        c = channel
        self.exec = c.unary_stream(_SERVICE + "Exec", _serializer(pb.ExecRequest), pb.ExecResponse.FromString)
        self.start_process = c.unary_unary(
            _SERVICE + "StartProcess", _serializer(pb.StartProcessRequest), pb.StartProcessResponse.FromString
        )
        self.stream_logs = c.unary_stream(
            _SERVICE + "StreamLogs", _serializer(pb.StreamLogsRequest), pb.StreamLogsResponse.FromString
        )
        self.send_input = c.stream_stream(
            _SERVICE + "SendInput", _serializer(pb.SendInputRequest), pb.SendInputResponse.FromString
        )
        self.get_process = c.unary_unary(
            _SERVICE + "GetProcess", _serializer(pb.GetProcessRequest), pb.GetProcessResponse.FromString
        )
        self.list_processes = c.unary_unary(
            _SERVICE + "ListProcesses", _serializer(pb.ListProcessesRequest), pb.ListProcessesResponse.FromString
        )
        self.kill_process = c.unary_unary(
            _SERVICE + "KillProcess", _serializer(pb.KillProcessRequest), pb.KillProcessResponse.FromString
        )
        self.kill_all_processes = c.unary_unary(
            _SERVICE + "KillAllProcesses",
            _serializer(pb.KillAllProcessesRequest),
            pb.KillAllProcessesResponse.FromString,
        )
        self.cleanup_processes = c.unary_unary(
            _SERVICE + "CleanupProcesses",
            _serializer(pb.CleanupProcessesRequest),
            pb.CleanupProcessesResponse.FromString,
        )
        self.get_process_logs = c.unary_unary(
            _SERVICE + "GetProcessLogs", _serializer(pb.GetProcessLogsRequest), pb.GetProcessLogsResponse.FromString
        )
        self.wait_for_port = c.unary_unary(
            _SERVICE + "WaitForPort", _serializer(pb.WaitForPortRequest), pb.WaitForPortResponse.FromString
        )
        self.wait_for_log = c.unary_unary(
            _SERVICE + "WaitForLog", _serializer(pb.WaitForLogRequest), pb.WaitForLogResponse.FromString
        )
        self.wait_for_exit = c.unary_unary(
            _SERVICE + "WaitForExit", _serializer(pb.WaitForExitRequest), pb.WaitForExitResponse.FromString
        )
        self.list_ports = c.unary_unary(
            _SERVICE + "ListPorts", _serializer(pb.ListPortsRequest), pb.ListPortsResponse.FromString
        )
        #: The file service's methods on the same channel.
        self.files = FileRpc(channel)


class FileRpc:
    """FileRpc is sandbox.v1.FileService's nine methods on a channel, typed (see :class:`SandboxRpc`)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        c = channel
        self.read = c.unary_stream(_FILE_SERVICE + "Read", _serializer(files_pb.ReadRequest), files_pb.ReadResponse.FromString)
        self.write = c.stream_unary(_FILE_SERVICE + "Write", _serializer(files_pb.WriteRequest), files_pb.WriteResponse.FromString)
        self.stat = c.unary_unary(_FILE_SERVICE + "Stat", _serializer(files_pb.StatRequest), files_pb.StatResponse.FromString)
        self.list = c.unary_unary(_FILE_SERVICE + "List", _serializer(files_pb.ListRequest), files_pb.ListResponse.FromString)
        self.make_dir = c.unary_unary(
            _FILE_SERVICE + "MakeDir", _serializer(files_pb.MakeDirRequest), files_pb.MakeDirResponse.FromString
        )
        self.remove = c.unary_unary(_FILE_SERVICE + "Remove", _serializer(files_pb.RemoveRequest), files_pb.RemoveResponse.FromString)
        self.move = c.unary_unary(_FILE_SERVICE + "Move", _serializer(files_pb.MoveRequest), files_pb.MoveResponse.FromString)
        self.chmod = c.unary_unary(_FILE_SERVICE + "Chmod", _serializer(files_pb.ChmodRequest), files_pb.ChmodResponse.FromString)
        self.watch = c.unary_stream(_FILE_SERVICE + "Watch", _serializer(files_pb.WatchRequest), files_pb.WatchResponse.FromString)
