"""A segment read in regions for the cleaner's two passes: whole regions for the C engine,
one batch at a time for everything it leaves (control and transactional batches, and the
pure-Python reference).

:class:`SegmentWalk` maps the segment file read-only and keeps one cursor for both kinds of
caller, so that a pass alternates between region calls and single batches without reading
anything twice, and without copying: a region is a view of the mapping, :data:`REGION_BYTES` at
most (the unit of a region call, and of throttling and abort checks). The checks of a single
batch are FileRecords.batches' framing and RecordBatch.validate; a batch that fails them, or a
tail that is not a complete batch, raises :class:`CorruptRecordError` naming the partition, the
file and the position (the cleaner then marks the partition uncleanable: nothing is rewritten
from bad bytes); so does an error inside a batch's records, raised under
:meth:`SegmentWalk.located`. Reads only; owned by one pass of one cleaner thread.

The segments a pass reads are sealed: nothing appends to or truncates them while they are
mapped (recovery truncates only while its log is being loaded; deletion unlinks, which leaves
a mapping readable), so the mapping cannot end before the walk does.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from typing import Final, Protocol

from storagecore.config import TopicPartition
from storagecore.errors import CorruptRecordError
from storagecore.records import layout
from storagecore.records.batch import RecordBatch
from storagecore.records.file_records import FileRecords
from storagecore.records.legacy import LegacyRecordBatch

#: Bytes read at a time: the unit of a region call, and of throttling and abort checks.
REGION_BYTES: Final = 1 << 20


class SegmentSource(Protocol):
    """What a cleaning pass reads of a segment: a :class:`~storagecore.segment.LogSegment`, or
    on a Spark executor a read-only ``FileRecords`` with its base offset."""

    @property
    def base_offset(self) -> int: ...

    @property
    def log(self) -> FileRecords: ...


class SegmentWalk:
    """The batches of ``segment`` from byte ``position`` to its end."""

    def __init__(self, tp: TopicPartition, segment: SegmentSource, position: int) -> None:
        self.tp = tp
        self.file = segment.log
        self.position = position
        self.end = segment.log.size_bytes
        self._mapped = memoryview(b"")
        self._mapping: mmap.mmap | None = None
        # Invariant: the pages below _released (page-aligned) are behind the cursor and were
        # dropped from this process's page tables.
        self._released = position - position % mmap.PAGESIZE
        if self.end > position:
            with self.file.pinned() as fd:
                mapping = mmap.mmap(fd, self.end, access=mmap.ACCESS_READ)
            mapping.madvise(mmap.MADV_SEQUENTIAL)
            # Views of it may outlive the walk (a batch waiting in the cleaner's output):
            # the mapping is released when the last one goes.
            self._mapped = memoryview(mapping)
            self._mapping = mapping

    def _release_behind(self) -> None:
        """Drop the mapped pages behind the cursor from this process's page tables, a region
        at a time: mapped file pages count in the resident set, and a pass over a segment
        would otherwise hold all of it (the peak RSS bound is dedupe buffer + 64 MiB). The
        page cache keeps them; a view still held (a batch in the cleaner's output) faults
        them back in from it, so what it reads is unchanged."""
        behind = self.position - self.position % mmap.PAGESIZE
        if self._mapping is not None and behind - self._released >= REGION_BYTES:
            self._mapping.madvise(mmap.MADV_DONTNEED, self._released, behind - self._released)
            self._released = behind

    def _view(self, size: int) -> memoryview:
        """``size`` bytes from the cursor (fewer only at the end of the file)."""
        return self._mapped[self.position : min(self.position + size, self.end)]

    def region(self) -> memoryview | None:
        """Up to :data:`REGION_BYTES` from the cursor; None at the end of the segment, and
        None at a legacy v0/v1 entry (the C region passes take magic 2 only: asking them
        would return at once, for every entry of an old segment)."""
        if self.position >= self.end:
            return None
        if (
            self.end - self.position > layout.MAGIC_OFFSET
            and self._mapped[self.position + layout.MAGIC_OFFSET] < layout.CURRENT_MAGIC
        ):
            return None
        return self._view(REGION_BYTES)

    def advance(self, size: int) -> None:
        """``size`` bytes were taken by a region call."""
        assert 0 <= size <= self.end - self.position
        self.position += size
        self._release_behind()

    def next_batch(self) -> tuple[int, RecordBatch] | None:
        """(position, batch) of the next batch, validated; None at the end of the segment."""
        position = self.position
        left = self.end - position
        if left <= 0:
            return None
        if left < layout.HEADER_SIZE_UP_TO_MAGIC:
            raise self._incomplete()
        prefix = layout.LOG_HEADER_PREFIX
        _base_offset, length = prefix.unpack_from(self._view(prefix.size))
        if length < layout.MIN_DECLARED_BATCH_LENGTH:
            raise CorruptRecordError(
                f"{self.tp}: {self.file.path}: batch at position {position} declares length "
                f"{length} (minimum {layout.MIN_DECLARED_BATCH_LENGTH})"
            )
        size = length + layout.LOG_OVERHEAD
        if size > left:
            raise self._incomplete()
        view = self._view(size)
        if view[layout.MAGIC_OFFSET] < layout.CURRENT_MAGIC:
            batch: RecordBatch = LegacyRecordBatch(view)  # a v0/v1 message or wrapper
        elif size < layout.RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"{self.tp}: {self.file.path}: batch at position {position} is {size} bytes, "
                f"smaller than the {layout.RECORD_BATCH_OVERHEAD}-byte header"
            )
        else:
            batch = RecordBatch(view)
        try:
            batch.validate()
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"{self.tp}: {self.file.path} at position {position}: {exc}"
            ) from exc
        self.position += size
        self._release_behind()
        return position, batch

    @contextlib.contextmanager
    def located(self, position: int) -> Iterator[None]:
        """Errors found inside the batch at ``position`` (its records do not decompress or do
        not parse) name the partition, the file and the position, as framing errors do."""
        try:
            yield
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"{self.tp}: {self.file.path} at position {position}: {exc}"
            ) from exc

    def _incomplete(self) -> CorruptRecordError:
        # A sealed segment must end on a batch boundary (FileRecords.batches stops quietly).
        return CorruptRecordError(
            f"{self.tp}: {self.file.path}: {self.end - self.position} bytes at position "
            f"{self.position} do not form a complete batch"
        )


class CheckedSpans:
    """The byte spans of segment files that one round's map pass took with region calls: their
    batches passed the engine's checks (framing, CRC-32C, records), so the filter pass, which
    reads the same bytes of the same sealed files, need not check them again (it still decides
    and writes everything as before). Keyed by the ``FileRecords`` object the pass read: a
    segment that is not the very one the map pass read (replaced, or opened again elsewhere)
    has no span. Only walks from a file's start are added (the cleaner's map pass), so that a
    span's batch boundaries are the filter's, which walks from the start too. Owned by one
    cleaner thread."""

    def __init__(self) -> None:
        # Invariant: per file, spans are (start, end) positions, sorted, disjoint and not
        # touching (add merges a span that continues the last one). The files are held until
        # clear(), at the end of the round (a weak mapping cost a weak reference per call).
        self._spans: dict[FileRecords, list[tuple[int, int]]] = {}

    def clear(self) -> None:
        self._spans.clear()

    def add(self, file: FileRecords, position: int, size: int) -> None:
        """A region call took ``size`` bytes of ``file`` from ``position``."""
        if size <= 0:
            return
        spans = self._spans.get(file)
        if spans is None:
            spans = self._spans[file] = []
        if spans and spans[-1][1] == position:
            spans[-1] = (spans[-1][0], position + size)
        else:
            assert not spans or spans[-1][1] < position, (file.path, spans[-1], position)
            spans.append((position, position + size))

    def checked_from(self, file: FileRecords, position: int) -> int:
        """How many bytes of ``file`` from ``position`` lie in one span (0: none)."""
        for start, end in self._spans.get(file, ()):
            if start <= position < end:
                return end - position
        return 0
