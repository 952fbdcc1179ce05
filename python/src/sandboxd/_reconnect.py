"""How a background process's handle resumes after a broken stream: which failures are transient, how long to wait."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import grpc
import grpc.aio


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """ReconnectPolicy says how a handle following a background process reconnects on its own (the LangSmith sandbox SDK).

    After a transient failure (see :func:`is_transient`) the handle waits ``backoff_base·2ⁿ⁻¹`` seconds for the
    n-th consecutive failure, capped at ``backoff_max``, of which a random share up to ``jitter`` is taken off (so
    many clients cut at once do not come back in step), then resumes from its offsets. After ``max_attempts``
    consecutive failures it gives up with a SandboxUnavailableError; the count restarts once the stream delivers.
    """

    #: Consecutive failed reconnect attempts before the handle gives up (the LangSmith sandbox SDK's MAX_AUTO_RECONNECTS).
    max_attempts: int = 5
    #: First delay in seconds, doubled on each consecutive failure (the LangSmith sandbox SDK's BACKOFF_BASE).
    backoff_base: float = 0.5
    #: Largest delay in seconds (the LangSmith sandbox SDK's BACKOFF_MAX).
    backoff_max: float = 10.0
    #: Share of each delay taken off at random, 0 to 1: 0.5 waits between half and all of it.
    jitter: float = 0.5

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the ``attempt``-th consecutive reconnect (1-based)."""
        full = min(self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1))
        draw = rng.random() if rng is not None else random.random()
        return full * (1 - self.jitter * draw)


# Messages of grpc-core for a stream or connection that broke under the call rather than a refusal by the daemon.
_TRANSPORT_FAILURE = re.compile(
    r"rst_stream|stream removed|socket closed|connection reset|broken pipe|goaway|transport|eof|end of tcp stream"
    r"|keepalive|failed to connect|connection refused|ping timeout",
    re.IGNORECASE,
)


def is_transient(error: grpc.aio.AioRpcError) -> bool:
    """Whether a failed stream is worth resuming: UNAVAILABLE (a refused or reset connection, a dead path found by
    keepalive, the daemon going away), and CANCELLED, INTERNAL, UNKNOWN or ABORTED that came from the connection
    rather than from the daemon's handler (a call this client cancelled never gets here). Everything else
    (NOT_FOUND, PERMISSION_DENIED, ...) is the daemon's answer.
    """
    code = error.code()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return True
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.ABORTED):
        return bool(_TRANSPORT_FAILURE.search(error.details() or ""))
    return False
