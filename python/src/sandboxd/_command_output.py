"""CommandOutput: what a handle does with the bytes it receives (the TypeScript client's command-output.ts)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

from ._chunk_queue import ChunkQueue
from .errors import OutputLostError
from .output import OutputChunk, RetainedOutput, StreamName

#: Queue capacity of one iterator, in bytes: beyond it the stream is held back (backpressure).
_ITERATOR_CAPACITY_BYTES = 4 * 1024 * 1024


class CommandOutput:
    """CommandOutput keeps the offsets a reconnect resumes from, skips bytes below them (so none is duplicated), turns
    a hole into an :class:`~sandboxd.OutputLostError`, and hands each new chunk to the output kept for the result and
    to every iterator, each through a bounded :class:`ChunkQueue` (the slowest holds the stream back). It also knows
    where the user is: the offsets after the last chunk an iterator handed over, which is where ``reconnect()``
    resumes."""

    def __init__(self, retained: RetainedOutput, offsets: dict[StreamName, int] | None = None) -> None:
        #: Offsets after the last byte received: where a new call of the stream starts.
        self.offsets: dict[StreamName, int] = dict(offsets or {"stdout": 0, "stderr": 0})
        #: The output kept for the result.
        self.retained = retained
        # Where the user is: offsets after the last chunk an iterator handed over (None until one did). The pump
        # goes on receiving for the result while nobody iterates, so it can be ahead of what the user saw.
        self._seen: dict[StreamName, int] | None = None
        self._from: dict[StreamName, int] = dict(self.offsets)
        self._subscribers: set[ChunkQueue] = set()

    def resume_offsets(self) -> dict[StreamName, int]:
        """Where the user is (see the class comment), or what was received while no iterator handed anything over."""
        return dict(self._seen if self._seen is not None else self.offsets)

    async def deliver(self, received: OutputChunk) -> None:
        """Hands a chunk to the result and every iterator, skipping bytes already received; raises OutputLostError
        for a hole before it (the offset then moves past the hole)."""
        expected = self.offsets[received.stream]
        if received.end <= expected:
            return
        if received.offset > expected:
            self.offsets[received.stream] = received.offset
            raise OutputLostError(received.stream, expected, received.offset - expected)
        chunk = received if received.offset == expected else OutputChunk(received.stream, received.data[expected - received.offset :], expected)
        self.offsets[chunk.stream] = chunk.end
        self.retained.push(chunk)
        for queue in list(self._subscribers):
            await queue.put(chunk)

    def gap(self, stream: StreamName, offset: int, missed_bytes: int) -> None:
        """Output the daemon no longer retains: only bytes from our own offset on count as lost (OutputLostError);
        the offset moves past them for ``reconnect()``."""
        end = offset + missed_bytes
        start = max(offset, self.offsets[stream])
        if end > start:
            self.offsets[stream] = end
            raise OutputLostError(stream, start, end - start)

    def finish(self, error: BaseException | None) -> None:
        """Ends every iterator after what it holds: cleanly, or with ``error``."""
        for queue in self._subscribers:
            queue.finish(error)

    def subscribe(self) -> ChunkQueue:
        """Subscribes an iterator now, before it runs: every chunk delivered from here on is queued for it (the stream
        is held back while its queue is full). Pass the queue to :meth:`iterate`."""
        queue = ChunkQueue(_ITERATOR_CAPACITY_BYTES)
        self._subscribers.add(queue)
        return queue

    async def iterate(
        self,
        ended: Callable[[], tuple[bool, BaseException | None]],
        follow: Callable[[], object],
        subscribed: ChunkQueue | None = None,
    ) -> AsyncGenerator[OutputChunk, None]:
        """Yields what was received, then each new chunk; ``ended()`` says whether the stream has settled (and with
        which error), ``follow()`` starts following it. With a queue from :meth:`subscribe`, yields what was queued
        since it subscribed instead of what was kept for the result."""
        if subscribed is not None:
            replay: list[OutputChunk] = []
            queue = subscribed
        else:
            # Subscribing and copying what was received happen in one step, so no chunk is missed or doubled.
            replay = self.retained.received()
            settled, error = ended()
            if settled:
                for chunk in replay:
                    yield chunk
                if error is not None:
                    raise error
                return
            queue = self.subscribe()
        try:
            follow()
            for chunk in replay:
                self._saw(chunk.stream, chunk.end)
                yield chunk
            while True:
                try:
                    chunk_or_end = await queue.get()
                except OutputLostError as lost:
                    # The user was told of the hole: where they are is past it.
                    self._saw(lost.stream, lost.offset + lost.missed_bytes)
                    raise
                if chunk_or_end is None:
                    return
                self._saw(chunk_or_end.stream, chunk_or_end.end)
                yield chunk_or_end
        finally:
            self._subscribers.discard(queue)
            queue.close()

    def _saw(self, stream: StreamName, end: int) -> None:
        if self._seen is None:
            self._seen = dict(self._from)
        self._seen[stream] = max(self._seen[stream], end)
