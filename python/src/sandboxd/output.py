"""Output as the daemon delivers it: chunks of bytes with their offsets, and the bytes of a whole stream."""

from __future__ import annotations

import codecs
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Self

#: Name of one of a process's output streams. A PTY process writes everything to stdout.
StreamName = Literal["stdout", "stderr"]


class Output(bytes):
    """Output is bytes a command printed, exactly as written, with text helpers.

    It is ``bytes`` (compare it, slice it, write it to a file); ``.text`` decodes it with the encoding of the call
    that produced it (UTF-8 by default), replacing bytes that do not decode with U+FFFD.
    """

    encoding: str

    def __new__(cls, data: bytes = b"", encoding: str = "utf-8") -> Self:
        value = super().__new__(cls, data)
        value.encoding = encoding
        return value

    @property
    def text(self) -> str:
        """The bytes decoded as text."""
        return self.decode(self.encoding, errors="replace")

    def lines(self) -> list[str]:
        """The text split into lines, without their line endings."""
        return self.text.splitlines()


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """OutputChunk is a run of bytes one output stream delivered, exactly as the process wrote them."""

    #: Which stream the bytes came from.
    stream: StreamName
    #: The bytes.
    data: bytes
    #: Byte offset of ``data``'s first byte within its stream (stdout and stderr count separately).
    offset: int

    @property
    def end(self) -> int:
        """Offset after the chunk's last byte."""
        return self.offset + len(self.data)


@dataclass(frozen=True, slots=True)
class InputAck:
    """InputAck acknowledges one message sent to a process's stdin or PTY."""

    #: Total bytes written to the process's stdin so far, by every writer.
    bytes_written: int
    #: Whether stdin is now closed.
    closed: bool


class StreamDecoder:
    """StreamDecoder turns the chunks of both output streams into text, one incremental decoder per stream.

    A multi-byte character split across chunks (or across a reconnect) is never broken. ``encoding`` is any codec
    name Python knows; bytes that do not decode become U+FFFD. An unknown encoding raises LookupError.
    """

    def __init__(self, encoding: str = "utf-8") -> None:
        factory = codecs.getincrementaldecoder(encoding)
        self.encoding = encoding
        self._decoders = {"stdout": factory(errors="replace"), "stderr": factory(errors="replace")}

    def decode(self, stream: StreamName, data: bytes) -> str:
        """Decodes the next bytes of ``stream``; may return "" while a character is incomplete."""
        return self._decoders[stream].decode(data)

    def flush(self, stream: StreamName) -> str:
        """Flushes what is left of ``stream`` (an incomplete character becomes U+FFFD)."""
        return self._decoders[stream].decode(b"", final=True)


@dataclass(frozen=True, slots=True)
class JoinedOutput:
    """The bytes of a run of chunks: each stream on its own and both joined in arrival order."""

    stdout: Output
    stderr: Output
    output: Output


def join_chunks(chunks: Sequence[OutputChunk], encoding: str = "utf-8") -> JoinedOutput:
    """Joins chunks (in arrival order) into :class:`JoinedOutput`. When only one stream has output, ``output`` is the
    same object as that stream's bytes: a result holds its output once."""
    parts: dict[StreamName, list[bytes]] = {"stdout": [], "stderr": []}
    for chunk in chunks:
        parts[chunk.stream].append(chunk.data)
    stdout = Output(b"".join(parts["stdout"]), encoding)
    stderr = Output(b"".join(parts["stderr"]), encoding)
    if not stderr:
        output = stdout
    elif not stdout:
        output = stderr
    else:
        output = Output(b"".join(chunk.data for chunk in chunks), encoding)
    return JoinedOutput(stdout=stdout, stderr=stderr, output=output)


class RetainedOutput:
    """RetainedOutput keeps the chunks a handle received for its result, at most ``limit_bytes`` of them.

    Beyond the limit the oldest chunks are dropped and counted per stream. Chunks carried over from an earlier
    handle (see ``reconnect()``) count towards the result but are never replayed to the new handle's iterators;
    only what lies below ``up_to`` is carried (the new handle receives the rest again).
    """

    def __init__(self, limit_bytes: float, inherited: RetainedOutput | None = None, *, up_to: dict[StreamName, int] | None = None) -> None:
        #: Most bytes kept; ``math.inf`` for no limit.
        self.limit_bytes = limit_bytes
        self._chunks: list[tuple[OutputChunk, bool]] = []
        self._size = 0
        # The byte ranges dropped, per stream: [start, end) pairs in order, adjacent ones merged.
        self._dropped: dict[StreamName, list[list[int]]] = {"stdout": [], "stderr": []}
        if inherited is not None:
            for stream in ("stdout", "stderr"):
                bound = up_to[stream] if up_to is not None else math.inf
                self._dropped[stream] = [[start, int(min(end, bound))] for start, end in inherited._dropped[stream] if start < bound]
            for chunk in inherited.retained():
                kept = chunk if up_to is None else _below(chunk, up_to[chunk.stream])
                if kept is not None:
                    self._push(kept, True)

    @property
    def dropped_bytes(self) -> dict[StreamName, int]:
        """Bytes dropped from the front of each stream so far."""
        return {stream: sum(end - start for start, end in ranges) for stream, ranges in self._dropped.items()}

    @property
    def dropped_ranges(self) -> list[tuple[StreamName, int, int]]:
        """The ranges dropped, stdout's first: (stream, offset of the first byte missing, how many are)."""
        return [(stream, start, end - start) for stream, ranges in self._dropped.items() for start, end in ranges]

    def push(self, chunk: OutputChunk) -> None:
        """Keeps a chunk this handle received, dropping the oldest beyond the limit."""
        self._push(chunk, False)

    def retained(self) -> list[OutputChunk]:
        """Every chunk kept, inherited ones first, in arrival order."""
        return [chunk for chunk, _ in self._chunks]

    def received(self) -> list[OutputChunk]:
        """The chunks kept that this handle itself received."""
        return [chunk for chunk, inherited in self._chunks if not inherited]

    def _push(self, chunk: OutputChunk, inherited: bool) -> None:
        self._chunks.append((chunk, inherited))
        self._size += len(chunk.data)
        while self._size > self.limit_bytes and self._chunks:
            dropped, _ = self._chunks.pop(0)
            self._size -= len(dropped.data)
            ranges = self._dropped[dropped.stream]
            if ranges and ranges[-1][1] == dropped.offset:
                ranges[-1][1] = dropped.end
            else:
                ranges.append([dropped.offset, dropped.end])


def _below(chunk: OutputChunk, bound: int) -> OutputChunk | None:
    """The part of ``chunk`` below offset ``bound``, or None when nothing of it is."""
    if chunk.offset >= bound:
        return None
    if chunk.end <= bound:
        return chunk
    return OutputChunk(chunk.stream, chunk.data[: bound - chunk.offset], chunk.offset)
