"""The cleaned segment being written by one group of a clean (Kafka ``cleanInto``'s output).

Batches are buffered and appended in index-interval chunks, so the cleaned segment's offset
index is as dense as one written by appends; a native region's output arrives already cut into
chunks. Only :mod:`storagecore.cleaner.cleaner` writes through it.
"""

from __future__ import annotations

from collections.abc import Callable

from storagecore.cleaner.offset_map import CHUNK_END, FilteredRegion, OutputChunk
from storagecore.durability import WriteBehind
from storagecore.records import layout
from storagecore.segment import AppendedChunk, LogSegment


class CleanedOutput:
    """The cleaned segment being written: batches buffered and appended in index-interval
    chunks, so that its offset index is as dense as one written by appends."""

    def __init__(
        self,
        segment: LogSegment,
        flush_bytes: int,
        throttle: Callable[[int], None],
        write_behind: WriteBehind | None = None,
    ):
        self.segment = segment
        self._write_behind = write_behind
        self._flush_bytes = max(flush_bytes, 1)
        self._throttle = throttle
        self._parts: list[bytes | bytearray | memoryview] = []
        self._pending = 0
        self._last_offset = -1
        self._max_timestamp = layout.NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        self.bytes_written = 0

    def add(
        self, data: bytes | bytearray | memoryview, last_offset: int, max_timestamp: int
    ) -> None:
        self._parts.append(data)
        self._pending += len(data)
        self._last_offset = last_offset
        if max_timestamp > self._max_timestamp or self._offset_of_max_timestamp < 0:
            self._max_timestamp = max(max_timestamp, self._max_timestamp)
            self._offset_of_max_timestamp = last_offset
        if self._pending >= self._flush_bytes:
            self.flush()

    @property
    def chunk(self) -> OutputChunk:
        """The chunk being filled, as :meth:`SkimpyOffsetMap.filter_region` continues it."""
        return OutputChunk(
            self._flush_bytes,
            self._pending,
            self._last_offset,
            self._max_timestamp,
            self._offset_of_max_timestamp,
        )

    def add_region(self, filtered: FilteredRegion) -> None:
        """A region's output, cut into chunks by the engine as :meth:`add` would cut its
        batches: every chunk it completed goes to the segment in one write (with the
        pending bytes before it), the rest stays pending."""
        data = filtered.output
        chunks = filtered.chunks
        if chunks:
            ends = list(CHUNK_END.iter_unpack(chunks))
            done = ends[-1][0]
            head = self._pending
            self._parts.append(memoryview(data)[:done])
            joined = b"".join(self._parts)
            self.segment.append_chunks(
                joined, [AppendedChunk(end + head, *rest) for end, *rest in ends]
            )
            self._throttle(len(joined))
            self.bytes_written += len(joined)
            if self._write_behind is not None:
                self._write_behind.written(self.bytes_written)
            self._parts = [memoryview(data)[done:]] if done < len(data) else []
        elif data:
            self._parts.append(data)
        after = filtered.chunk
        self._pending = after.pending
        self._last_offset = after.last_offset
        self._max_timestamp = after.max_timestamp
        self._offset_of_max_timestamp = after.offset_of_max_timestamp

    def flush(self) -> None:
        if not self._parts:
            return
        data = b"".join(self._parts)
        self.segment.append(
            self._last_offset, self._max_timestamp, self._offset_of_max_timestamp, data
        )
        self._throttle(len(data))
        self.bytes_written += len(data)
        if self._write_behind is not None:
            self._write_behind.written(self.bytes_written)
        self._parts = []
        self._pending = 0
        self._max_timestamp = layout.NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
