"""The read by offset of one log segment: the part of Kafka's LogSegment that translates an
offset to a position (``translateOffset``) and reads whole batches from there (``read``).
:class:`~storagecore.segment.LogSegment` is the rest; it inherits these methods.

A bytes read runs in one native call when the extension is built
(:data:`storagecore.records.fetch.read_by_offset`: the header walk, the fetch range and its next
offset, with one or two ``pread`` calls and no Python between them); the Python methods below
are its reference and take whatever it hands back (legacy entries, damaged headers), the file
regions of the zero-copy path, and every read with ``STORAGECORE_NO_EXTENSIONS=1``.

Callers hold the owning Log's lock, as for every segment method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from storagecore.log_info import FetchData
from storagecore.records import fetch
from storagecore.records.file_records import BatchHeader, FileRecords, next_offset_within

if TYPE_CHECKING:
    from storagecore.index import OffsetIndex

#: Single-header reads tried before a chunked header walk when translating an offset.
_SHORT_WALK_BATCHES: Final = 4
_read_by_offset: Final = fetch.read_by_offset


class SegmentReads:
    """:meth:`read` and :meth:`translate_offset` of a segment (mixed into LogSegment)."""

    base_offset: int

    if TYPE_CHECKING:  # LogSegment's (checked on first use)

        @property
        def log(self) -> FileRecords: ...

        @property
        def offset_index(self) -> OffsetIndex: ...

        def next_offset(self) -> int: ...

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset`` (searching from the index hint)."""
        position = max(self.offset_index.lookup(offset).position, starting_position)
        # The index entry usually points at the batch holding the offset or at the one before
        # it (entries carry a batch's last offset): try a few single-header reads first.
        for _ in range(_SHORT_WALK_BATCHES):
            header = self.log.header_at(position)
            if header is None:
                break
            if header.last_offset >= offset:
                return header
            position = header.position + header.size_bytes
        for header in self.log.batch_headers(min(position, self.log.size_bytes)):
            if header.last_offset >= offset:
                return header
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
        region_min_bytes: int | None = None,
    ) -> FetchData | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes.

        With ``min_one_message`` the first batch is returned whole even if it exceeds
        ``max_size``. Returns None when no batch in this segment reaches ``start_offset``.
        A read of at least ``region_min_bytes`` (None: never) comes back as a file region.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for read from {self.log.path}")
        log = self.log
        if max_position is None:
            max_position = log.size_bytes
        if region_min_bytes is None and _read_by_offset is not None:
            offsets, positions = self.offset_index.columns()
            fd = log.acquire()
            try:
                native = _read_by_offset(
                    fd,
                    offsets,
                    positions,
                    self.base_offset,
                    start_offset,
                    max_size,
                    max_position,
                    log.size_bytes,
                    min_one_message,
                )
            finally:
                log.release()
            if native is not None:
                position, records, incomplete, next_offset = native
                if position == fetch.NOT_FOUND:
                    return None
                if next_offset == fetch.SEGMENT_END and records:
                    next_offset = self.next_offset()
                return FetchData(
                    start_offset, self.base_offset, position, records, incomplete, next_offset
                )
        return self._read_python(
            start_offset, max_size, max_position, min_one_message, region_min_bytes
        )

    def _read_python(
        self,
        start_offset: int,
        max_size: int,
        max_position: int,
        min_one_message: bool,
        region_min_bytes: int | None,
    ) -> FetchData | None:
        """:meth:`read` in Python: the reference of the native read, and the region path."""
        header = self.translate_offset(start_offset)
        if header is None:
            return None
        adjusted_max = max(max_size, header.size_bytes) if min_one_message else max_size
        position = header.position
        if adjusted_max == 0 or position >= max_position:
            return FetchData(start_offset, self.base_offset, position, b"", False, start_offset)
        if not min_one_message and header.size_bytes > max_size:
            return FetchData(start_offset, self.base_offset, position, b"", True, start_offset)
        fetch_size = min(max_position - position, adjusted_max)
        if region_min_bytes is not None and fetch_size >= max(region_min_bytes, 1):
            next_offset = self._next_offset_before(header, position + fetch_size)
            region = self.log.region(position, fetch_size)
            return FetchData(
                start_offset, self.base_offset, position, b"", False, next_offset, region
            )
        data = self.log.read(position, fetch_size)
        end = position + len(data)
        if end >= self.log.size_bytes:
            next_offset = self.next_offset()
        else:  # the last complete batch's end, from the headers in the bytes read
            walk_from = self._walk_start(header, end)
            next_offset = next_offset_within(data, position, walk_from, header.base_offset)
            if next_offset < 0:  # legacy entries: the file's walk
                next_offset = self._next_offset_before(header, end)
        return FetchData(start_offset, self.base_offset, position, data, False, next_offset)

    def _next_offset_before(self, first: BatchHeader, end: int) -> int:
        """Offset after the last batch that ends at or before position ``end``.

        The batch ``first`` is whole. The walk starts one index entry before the last entry at or
        below ``end``: that entry's batch ends at or before the next entry, hence before ``end``,
        so the walk always passes the last complete batch (a short walk: entries are at most
        ``index.interval.bytes`` plus one batch apart).
        """
        if end >= self.log.size_bytes:
            return self.next_offset()
        position = self._walk_start(first, end)
        next_offset = first.base_offset  # nothing complete: the fetch is one cut batch
        while True:
            header = self.log.header_at(position)
            if header is None or header.position + header.size_bytes > end:
                return next_offset
            next_offset = header.next_offset
            position += header.size_bytes

    def _walk_start(self, first: BatchHeader, end: int) -> int:
        """Where the walk for the last batch ending by ``end`` starts: one index entry before
        the last entry at or below ``end``, not before the whole batch ``first``."""
        return max(self.offset_index.lookup_position(end, entries_back=1).position, first.position)
