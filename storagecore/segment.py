"""One log segment: a ``.log`` file with its ``.index``, ``.timeindex`` and ``.txnindex``
(Kafka's LogSegment).

Invariant: ``base_offset <= every offset in this segment < next segment's base_offset``, and
every relative offset fits in an int32.

Callers hold the owning Log's lock; a segment is not thread-safe by itself.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from storagecore import files
from storagecore.errors import SegmentOffsetOverflowError
from storagecore.file_cache import CachedFile, FileCache
from storagecore.index import OffsetIndex, TimeIndex, TimestampOffset
from storagecore.records.batch import RecordBatch
from storagecore.records.file_records import FileRecords
from storagecore.records.layout import INT32_MAX, NO_TIMESTAMP
from storagecore.segment_files import SegmentFiles, UnopenedFiles
from storagecore.segment_read import SegmentReads

logger = logging.getLogger(__name__)

# Serialises the deferred first-use checks (rare: once per segment after a clean load); an RLock
# because the check itself goes through the segment's checked accessors.
_VERIFY_LOCK = threading.RLock()


class AppendedChunk(NamedTuple):
    """One chunk of :meth:`LogSegment.append_chunks`: the arguments of one :meth:`~LogSegment.
    append`, with where its records end."""

    end: int
    largest_offset: int
    largest_timestamp: int
    shallow_offset_of_max_timestamp: int


class LogSegment(SegmentFiles, SegmentReads):
    # The native append's slots: the attributes its glue reads and writes on every append
    # (records/_segment_append.c; held_log is Log.append's, records/_log_append.c), kept at
    # fixed offsets it reaches directly (records/_slots.h). Everything else is in the instance
    # dict, as before.
    __slots__ = (
        "_log",
        "_max_timestamp",
        "_next_offset",
        "_offset_index",
        "_time_index",
        "_verify_with",
        "base_offset",
        "bytes_since_last_index_entry",
        "created_ms",
        "held_log",
        "index_interval_bytes",
        "rolling_based_timestamp",
        "rolling_jitter_ms",
    )

    def __init__(  # noqa: PLR0917 - Kafka's constructor, called only by open() and tests
        self,
        log: FileRecords,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        base_offset: int,
        index_interval_bytes: int,
        rolling_jitter_ms: int,
        created_ms: int,
    ) -> None:
        self._log = log
        self._offset_index = offset_index
        self._time_index = time_index
        self._init_state(base_offset, index_interval_bytes, rolling_jitter_ms, created_ms)

    def _init_state(
        self, base_offset: int, index_interval_bytes: int, rolling_jitter_ms: int, created_ms: int
    ) -> None:
        # Set for a segment opened deferred (open() with a cache and verify_on_first_use): its
        # FileRecords and indexes do not exist yet, built on first use (_open_files); None once
        # they do. Invariant: _log, _offset_index and _time_index are set iff this is None.
        self._unopened = None
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = created_ms
        self.bytes_since_last_index_entry = 0
        # Largest timestamp in the segment and the last offset of the batch that first reached
        # it; None until first asked (read from the time index then, as Kafka's
        # maxTimestampAndOffsetSoFar: loading a log reads no inactive segment).
        self._max_timestamp: tuple[int, int] | None = None
        # Set by the loader (defer_verification): the check it would run at load runs on the
        # segment's first use instead (storagecore.loader, pass 3); None once done.
        self._verify_with: Callable[[LogSegment], None] | None = None
        self._verifying = False
        # Timestamp that time-based rolling measures from (first batch's max timestamp).
        self.rolling_based_timestamp: int | None = None
        self._next_offset: int | None = None
        #: The cache this segment's files open through (None: kept open); segments written
        #: for this one's log (the cleaner's) use it too.
        self.file_cache: FileCache | None = None
        # The three cached handles (pin_files), found once.
        self._handles: tuple[CachedFile, ...] | None = None
        # Held for appends while active (hold_files).
        self.held_log = None
        self._held = ()

    # -- open / names ------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size_bytes: int,
        now_ms: int,
        rolling_jitter_ms: int = 0,
        suffix: str = "",
        writable_indexes: bool = True,
        file_cache: FileCache | None = None,
        verify_on_first_use: Callable[[LogSegment], None] | None = None,
    ) -> LogSegment:
        """The segment's files, created when absent. With ``file_cache`` nothing of an existing
        segment opened with ``writable_indexes=False`` is opened here: its descriptors open on
        use and the cache closes them when idle (storagecore.file_cache). With
        ``verify_on_first_use`` not even the indexes' lengths are read now
        (:meth:`defer_verification`), and with both the file objects themselves are built on
        first use: a clean load of a log of many segments costs one ``stat`` per segment (its
        size) and one small object (:meth:`_open_files`)."""
        if verify_on_first_use is not None and file_cache is not None and not writable_indexes:
            prefix = files.filename_prefix(base_offset)
            size_bytes = os.stat(f"{directory}/{prefix}{files.LOG_SUFFIX}{suffix}").st_size
            segment = cls.__new__(cls)
            segment._init_state(base_offset, index_interval_bytes, rolling_jitter_ms, now_ms)
            segment._unopened = UnopenedFiles(
                directory, prefix, suffix, max_index_size_bytes, file_cache, size_bytes
            )
            segment.file_cache = file_cache
            segment.defer_verification(verify_on_first_use)
            return segment
        log = FileRecords(files.log_file(directory, base_offset, suffix), cache=file_cache)
        offset_index = OffsetIndex(
            files.index_file(directory, base_offset, suffix),
            base_offset,
            max_index_size_bytes,
            writable=writable_indexes,
            cache=file_cache,
            deferred=verify_on_first_use is not None,
        )
        time_index = TimeIndex(
            files.time_index_file(directory, base_offset, suffix),
            base_offset,
            max_index_size_bytes,
            writable=writable_indexes,
            cache=file_cache,
            deferred=verify_on_first_use is not None,
        )
        segment = cls(
            log,
            offset_index,
            time_index,
            base_offset,
            index_interval_bytes,
            rolling_jitter_ms,
            now_ms,
        )
        segment.file_cache = file_cache
        if verify_on_first_use is not None:
            segment.defer_verification(verify_on_first_use)
        return segment

    # -- files, checked on first use -----------------------------------------------------------
    def defer_verification(self, verify: Callable[[LogSegment], None]) -> None:
        """Run ``verify`` (the loader's check, rebuilding the indexes if it fails:
        :mod:`storagecore.segment_recovery`) on this segment's first use rather than now: what
        lets a log of many segments load after a clean shutdown without reading them."""
        self._verify_with = verify

    def _verify(self) -> None:
        with _VERIFY_LOCK:
            if self._unopened is not None:
                self._open_files()
            verify = self._verify_with
            if verify is None or self._verifying:
                return
            self._verifying = True
            try:
                self._offset_index.load_length()
                self._time_index.load_length()
                self._max_timestamp = None
                verify(self)
            finally:
                self._verifying = False
            self._verify_with = None

    @property
    def log(self) -> FileRecords:
        if self._verify_with is not None:
            self._verify()
        return self._log

    @property
    def offset_index(self) -> OffsetIndex:
        if self._verify_with is not None:
            self._verify()
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._verify_with is not None:
            self._verify()
        return self._time_index

    def max_timestamp_entry(self) -> tuple[int, int]:
        """(:attr:`max_timestamp_so_far`, :attr:`offset_of_max_timestamp_so_far`) in one call."""
        entry = self._max_timestamp
        if entry is None:
            last = self.time_index.last_entry
            entry = self._max_timestamp = (last.timestamp, last.offset)
        return entry

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_entry()[0]

    @max_timestamp_so_far.setter
    def max_timestamp_so_far(self, timestamp: int) -> None:
        self._max_timestamp = (timestamp, self.offset_of_max_timestamp_so_far)

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self.max_timestamp_entry()[1]

    @offset_of_max_timestamp_so_far.setter
    def offset_of_max_timestamp_so_far(self, offset: int) -> None:
        self._max_timestamp = (self.max_timestamp_so_far, offset)

    def _set_max_timestamp(self, timestamp: int, offset: int) -> None:
        self._max_timestamp = (timestamp, offset)

    @property
    def size_bytes(self) -> int:
        # The file's size as found (not checked: status and metrics sum it over every segment).
        unopened = self._unopened
        return self._log.size_bytes if unopened is None else unopened.size_bytes

    @property
    def offset_index_size_bytes(self) -> int:
        """Bytes of valid offset-index entries (what a cleaned segment's index will need)."""
        return self.offset_index.size_bytes

    @property
    def time_index_size_bytes(self) -> int:
        return self.time_index.size_bytes

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self.size_bytes}, "
            f"path={self._log_path()})"
        )

    # -- offsets -----------------------------------------------------------------------------
    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def next_offset(self) -> int:
        """Offset after the last batch, or the base offset when empty (Kafka ``readNextOffset``)."""
        if self._next_offset is None:
            next_offset = self.base_offset
            start = self.offset_index.lookup(self.offset_index.last_offset).position
            for header in self.log.batch_headers(min(start, self.log.size_bytes)):
                next_offset = header.next_offset
            self._next_offset = next_offset
        return self._next_offset

    def set_next_offset(self, next_offset: int) -> None:
        """Record the offset after the last batch, found by a walk over the whole file
        (:mod:`storagecore.segment_recovery`), so :meth:`next_offset` need not walk again."""
        self._next_offset = next_offset

    @property
    def largest_record_timestamp(self) -> int | None:
        return self.max_timestamp_so_far if self.max_timestamp_so_far >= 0 else None

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, falling back to the file's mtime (what retention compares)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.log.mtime_ms()

    # -- append ------------------------------------------------------------------------------
    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
    ) -> None:
        """Append validated batches whose last offset is ``largest_offset``."""
        if not records:
            return
        if not self.can_convert_to_relative_offset(largest_offset):
            raise SegmentOffsetOverflowError(
                f"{self.log.path}: offset {largest_offset} cannot be stored relative to base "
                f"offset {self.base_offset}"
            )
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            # Blocks for the index entries first: on a full filesystem nothing is written.
            self.offset_index.reserve_next()
            self.time_index.reserve_next()
        physical_position = self.log.append(records)
        self.record_appended(
            physical_position,
            len(records),
            largest_offset,
            largest_timestamp,
            shallow_offset_of_max_timestamp,
        )

    def record_appended(
        self,
        physical_position: int,
        size: int,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
    ) -> None:
        """The bookkeeping of an append whose ``size`` bytes are in the file at
        ``physical_position`` (written by :meth:`append`): timestamps, index entries, the next
        offset. The native append (``storagecore/records/_segment_append.c``) keeps the same
        bookkeeping itself."""
        if physical_position == 0:
            self.rolling_based_timestamp = largest_timestamp
        if largest_timestamp > self.max_timestamp_so_far:
            self._set_max_timestamp(largest_timestamp, shallow_offset_of_max_timestamp)
        # Entries track the bytes of previous appends: the first append never gets one.
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, physical_position)
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
            )
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size
        self._next_offset = largest_offset + 1

    def append_chunks(
        self, records: bytes | bytearray | memoryview, chunks: Sequence[AppendedChunk]
    ) -> None:
        """:meth:`append` of each chunk of ``records`` in turn (chunk ``i`` ends at
        ``chunks[i].end``; the last ends at ``len(records)``), with one write: the cleaner's
        output of a whole region. The segment and its indexes end as after those appends."""
        if not records:
            return
        assert chunks and chunks[-1].end == len(records), "chunks must cover records"
        largest_offset = chunks[-1].largest_offset
        if not self.can_convert_to_relative_offset(largest_offset):
            raise SegmentOffsetOverflowError(
                f"{self.log.path}: offset {largest_offset} cannot be stored relative to base "
                f"offset {self.base_offset}"
            )
        first_position = self.log.append(records)
        start = 0
        for end, chunk_offset, largest_timestamp, offset_of_max_timestamp in chunks:
            self.record_appended(
                first_position + start,
                end - start,
                chunk_offset,
                largest_timestamp,
                offset_of_max_timestamp,
            )
            start = end
        self._next_offset = largest_offset + 1

    # -- read (translate_offset and read: storagecore.segment_read) -----------------------
    def producer_batches(self, from_offset: int) -> Iterator[RecordBatch]:
        """Batches with a producer id from the one holding ``from_offset``: header-only
        copies, except control batches, which are read whole (their record says COMMIT or
        ABORT). The batches without a producer are skipped natively (FileRecords)."""
        start = self.translate_offset(from_offset) if from_offset > self.base_offset else None
        return self.log.producer_batches(start.position if start is not None else 0)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampOffset | None:
        """First record with timestamp >= ``timestamp`` and offset >= ``starting_offset``."""
        ts_entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_entry.offset, starting_offset)).position
        for _, batch in self.log.batches(position):
            if batch.max_timestamp >= timestamp:
                for record in batch.records():
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return TimestampOffset(record.timestamp, record.offset)
        return None

    def find_max_timestamp(self, starting_offset: int) -> TimestampOffset | None:
        """The first record at or after ``starting_offset`` that has the segment's largest
        timestamp (Kafka's ``readMaxTimestampAndOffsetSoFar``, at record precision)."""
        target = self.max_timestamp_so_far
        position = self.offset_index.lookup(self.offset_of_max_timestamp_so_far).position
        for _, batch in self.log.batches(position):
            if batch.max_timestamp == target:
                for record in batch.records():
                    if record.timestamp == target and record.offset >= starting_offset:
                        return TimestampOffset(record.timestamp, record.offset)
        return None

    # -- roll (the decision is storagecore.roll_params') ------------------------------------
    def first_batch_timestamp(self) -> int:
        """Max timestamp of the first batch (Kafka ``getFirstBatchTimestamp``), -1 when empty."""
        for header in self.log.batch_headers(0):
            return header.max_timestamp
        return NO_TIMESTAMP

    def load_first_batch_timestamp(self) -> None:
        """:attr:`rolling_based_timestamp` from the first batch, if not known yet."""
        if self.rolling_based_timestamp is None and self.log.size_bytes > 0:
            for header in self.log.batch_headers(0):
                self.rolling_based_timestamp = header.max_timestamp
                break

    def on_become_inactive_segment(self) -> None:
        """Final time-index entry (the segment's max timestamp) and trimmed indexes."""
        self.append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def append_final_time_entry(self) -> None:
        """The time index's entry for the segment's max timestamp, if it has none yet."""
        if self._max_timestamp is None:
            return  # never read nor changed since it was opened: the entry is there already
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
            )

    # -- recovery and truncation -------------------------------------------------------------
    def truncate_to(self, offset: int, max_index_size_bytes: int, now_ms: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; return bytes removed."""
        header = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if header is None:
            return 0
        self.offset_index.resize(max_index_size_bytes)
        self.time_index.resize(max_index_size_bytes)
        removed = self.log.truncate_to(header.position)
        if self.log.size_bytes == 0:
            self.created_ms = now_ms
            self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        self._max_timestamp = None  # read from the truncated time index when next asked
        self._next_offset = None
        return removed

    # -- lifecycle ---------------------------------------------------------------------------
    def flush(self) -> None:
        if self._unopened is not None:
            return  # never opened: nothing written
        self._log.flush()
        self._offset_index.flush()
        self._time_index.flush()
        if self._txn_index is not None:
            self._txn_index.flush()

    def file_paths(self) -> tuple[Path, ...]:
        """The files :meth:`flush` syncs and the transaction index (which may not exist), by
        path: a flush off the log's lock opens its own descriptors (storagecore.roll_flush),
        never the file cache's, which the cache may close meanwhile."""
        return (self.log.path, self.offset_index.path, self.time_index.path, self.txn_index_path())

    def close(self) -> None:
        self.release_held_files()
        if self._unopened is not None:
            self._unopened = self._unopened._replace(closed=True)
            return
        if self._log.closed:
            return
        self.append_final_time_entry()
        self._offset_index.close()
        self._time_index.close()
        self._log.close()
