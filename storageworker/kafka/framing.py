"""A connection's requests cut from the bytes the socket delivered, and its answers held back
while more Produce requests wait already read; used by :mod:`.server`'s connection loop.

Answers keep Kafka's order, one per request. What changes is when they are written: a Produce
answer waits (in :class:`HeldAnswers`) while the next request, already whole in the buffer, is a
Produce too, so that several answers go in one write. Under Kafka's Java producer (5 requests
in flight, 16 KiB batches) the worker wrote each answer on its own, and each write woke the
producer's network thread, which on the 2-core machine often took the worker's CPU in the
middle of the burst (``send`` was a quarter of py-spy's samples of the loop: the thread runnable,
not running); the producer's thread then woke up again for each of the other answers.

What must not happen: an answer held while the connection waits for anything (the answers are
written before any read that would wait, and before any other answer); more than
:data:`HELD_ANSWERS_MAX` answers held; an answer lost when the connection ends (the server
writes them before closing).
"""

from __future__ import annotations

import asyncio
from typing import Final

from storageworker.kafka.wire import Writer, frame_size

#: At most this many answers wait for the next one (the Java producer keeps 5 in flight).
HELD_ANSWERS_MAX: Final = 8
#: One read takes at most this many bytes from the stream (its buffer's limit).
READ_BYTES_MAX: Final = 1 << 20
_PRODUCE_KEY: Final = b"\x00\x00"  # the request header's api_key (int16) of Produce
_HEADER_BYTES: Final = 4  # a frame's size prefix


class IncomingFrames:
    """The bytes read from one connection and not yet taken as requests."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._buffer = bytearray()

    def buffered(self, size: int) -> bool:
        return len(self._buffer) >= size

    def next_size(self) -> int:
        """The declared size of the next frame (its header is buffered)."""
        assert len(self._buffer) >= _HEADER_BYTES
        return frame_size(bytes(self._buffer[:_HEADER_BYTES]))

    async def fill(self, size: int) -> bool:
        """Read until ``size`` bytes are buffered; False if the client closed before."""
        while len(self._buffer) < size:
            chunk = await self._reader.read(READ_BYTES_MAX)
            if not chunk:
                return False
            self._buffer += chunk
        return True

    def take(self, size: int) -> bytes:
        """The next frame's payload of ``size`` bytes (the frame is buffered)."""
        end = _HEADER_BYTES + size
        assert len(self._buffer) >= end
        payload = bytes(self._buffer[_HEADER_BYTES:end])
        del self._buffer[:end]
        return payload

    def next_is_whole_produce(self) -> bool:
        """Whether the next request is a Produce, already whole in the buffer."""
        buffer = self._buffer
        if len(buffer) < _HEADER_BYTES + 2 or buffer[_HEADER_BYTES : _HEADER_BYTES + 2] != (
            _PRODUCE_KEY
        ):
            return False
        return len(buffer) >= _HEADER_BYTES + self.next_size()


class HeldAnswers:
    """Framed answers not written yet, oldest first."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.count = 0

    def may_hold(self, payload: bytes, response: Writer, frames: IncomingFrames) -> bool:
        """Whether the answer to ``payload`` may wait: it answers a Produce, the next request
        is a whole Produce, fewer than the maximum wait, and it has no file region."""
        return (
            payload[:2] == _PRODUCE_KEY
            and self.count < HELD_ANSWERS_MAX
            and frames.next_is_whole_produce()
            and all(isinstance(part, bytes) for part in response.parts)
        )

    def hold(self, response: Writer) -> int:
        """Keep a framed answer (its parts are bytes); its size in bytes on the wire."""
        self._parts.append(response.size.to_bytes(4, "big"))
        for part in response.parts:
            assert isinstance(part, bytes), part
            self._parts.append(part)
        self.count += 1
        return response.size + 4

    def take(self) -> list[bytes]:
        """The held answers' bytes, in order; none are held after."""
        parts, self._parts, self.count = self._parts, [], 0
        return parts

    def write_to(self, writer: asyncio.StreamWriter) -> None:
        """Write the held answers (the connection's next drain or close sends them)."""
        if self.count:
            writer.write(b"".join(self.take()))
