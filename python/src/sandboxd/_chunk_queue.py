"""ChunkQueue: the chunks waiting for one iterator of a handle, bounded in bytes (the TypeScript client's
chunk-queue.ts)."""

from __future__ import annotations

import asyncio
from collections import deque

from .output import OutputChunk


class ChunkQueue:
    """The chunks waiting for one iterator, bounded in bytes: the pump waits for room (backpressure)."""

    def __init__(self, capacity_bytes: int) -> None:
        self._capacity = capacity_bytes
        self._items: deque[OutputChunk] = deque()
        self._size = 0
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._finished = False
        self._error: BaseException | None = None
        self._closed = False

    async def put(self, chunk: OutputChunk) -> None:
        """Adds a chunk, waiting while the queue is full; does nothing once the iterator has left."""
        while self._size >= self._capacity and not self._closed:
            self._room.clear()
            await self._room.wait()
        if self._closed:
            return
        self._items.append(chunk)
        self._size += len(chunk.data)
        self._ready.set()

    def finish(self, error: BaseException | None) -> None:
        """Ends the queue after what it holds: cleanly, or with ``error``."""
        self._finished = True
        self._error = error
        self._ready.set()

    def close(self) -> None:
        """The iterator left: drop what is queued and release a waiting ``put``."""
        self._closed = True
        self._items.clear()
        self._room.set()

    async def get(self) -> OutputChunk | None:
        """The next chunk, None at a clean end; raises the error of a failed end."""
        while not self._items:
            if self._finished:
                if self._error is not None:
                    raise self._error
                return None
            self._ready.clear()
            await self._ready.wait()
        chunk = self._items.popleft()
        self._size -= len(chunk.data)
        self._room.set()
        return chunk
