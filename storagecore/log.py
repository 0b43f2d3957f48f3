"""One partition's log: an ordered list of segments, the last one active (Kafka's UnifiedLog
and LocalLog together; there is one replica, so the high watermark is the log end offset).

Thread-safety: every public method takes the log's lock. Reads hold it too; they are short.

Invariants (DESIGN.md 1 and 3):
* segments are sorted by base offset, contiguous in offsets, and the last one is the only one
  that is appended to;
* ``log_start_offset <= recovery_point <= log_end_offset``, and every offset below the recovery
  point is fsynced: an acknowledged, flushed append survives a crash;
* a deleted segment leaves the segment list before its files are renamed to ``.deleted``, so it
  is never served again, and its files are unlinked only after ``file.delete.delay.ms``.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import itertools
import logging
import random
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from storagecore import durability, files
from storagecore.clock import Clock
from storagecore.config import LogConfig, TopicPartition
from storagecore.errors import LogDirOfflineError, OffsetOutOfRangeError, RecordTooLargeError
from storagecore.index import TimestampOffset
from storagecore.loader import load_log
from storagecore.log_validator import AppendOrigin, validate_and_assign_offsets
from storagecore.records import layout
from storagecore.records.batch import Record, RecordBatch, iter_complete_batches
from storagecore.records.file_records import FileRegion
from storagecore.records.layout import NO_TIMESTAMP
from storagecore.retention import RetentionPlan, SegmentView, plan_retention
from storagecore.segment import LogSegment, RollParams
from storagecore.transactions import TransactionState

_BASE_OFFSET = struct.Struct(">q")  # the first field of a batch, outside its CRC

logger = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

IoErrorCallback = Callable[[Path, OSError], None]


class LogAppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    valid_bytes: int


class FetchResult(NamedTuple):
    """Raw bytes of whole batches (the last possibly cut), plus the log's offsets at read time."""

    records: bytes
    fetch_offset: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    first_entry_incomplete: bool = False
    #: Where the next sequential fetch starts: after the last complete batch in ``records``
    #: (the fetch offset itself when ``records`` holds no complete batch).
    next_offset: int = -1
    #: The records as a zero-copy file region instead of bytes (``records`` is then empty);
    #: the caller sends it and closes it.
    region: FileRegion | None = None

    @property
    def size_bytes(self) -> int:
        return self.region.size_bytes if self.region is not None else len(self.records)


@dataclasses.dataclass(slots=True)
class _PendingDelete:
    due_ms: int
    segment: LogSegment


class Log:
    def __init__(
        self,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        clock: Clock,
        segments: Sequence[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        on_io_error: IoErrorCallback | None = None,
        leader_epoch: int = 0,
    ) -> None:
        assert segments, f"{tp}: a log has at least one segment"
        self.directory = directory
        self.tp = tp
        self._config = config
        self.clock = clock
        self._segments: list[LogSegment] = sorted(segments, key=lambda s: s.base_offset)
        self._bases: list[int] = [s.base_offset for s in self._segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._on_io_error = on_io_error
        self.leader_epoch = leader_epoch
        self._lock = threading.RLock()
        self._offline = False
        self._closed = False
        self._pending_deletes: list[_PendingDelete] = []
        self.last_flush_ms = clock.milliseconds()
        # Producer/transaction state derived from the log, extended as it grows; reset when
        # segments are removed or replaced (see transaction_state()).
        self._txn_state: TransactionState | None = None
        assert self._log_start_offset <= self.log_end_offset or self.size_bytes == 0, (
            f"{tp}: log start {log_start_offset} beyond log end {self.log_end_offset}"
        )

    # -- loading -------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        on_io_error: IoErrorCallback | None = None,
    ) -> Log:
        """Load (and if needed recover) the log in ``directory``, creating it if absent."""
        tp = files.parse_partition_dir_name(directory.name)
        directory.mkdir(parents=True, exist_ok=True)
        loaded = load_log(
            directory,
            tp,
            config,
            clock,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
        )
        return cls(
            directory,
            tp,
            config,
            clock,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            on_io_error=on_io_error,
        )

    # -- state ---------------------------------------------------------------------------------
    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._config = config
            for segment in self._segments:
                segment.index_interval_bytes = config.index_interval_bytes

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset()

    @property
    def high_watermark(self) -> int:
        """One replica: everything appended is committed."""
        return self.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def offline(self) -> bool:
        return self._offline

    @property
    def parent_dir(self) -> Path:
        return self.directory.parent

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

    def __repr__(self) -> str:
        return f"Log({self.tp}, dir={self.directory})"

    # -- I/O failures --------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._offline:
            raise LogDirOfflineError(
                f"{self.tp}: the log directory {self.parent_dir} is offline after an I/O error"
            )
        if self._closed:
            raise LogDirOfflineError(f"{self.tp}: the log is closed")

    def _io_failed(self, what: str, exc: OSError) -> LogDirOfflineError:
        """An OSError takes the log (and through the callback its log dir) offline."""
        self.mark_offline()
        if self._on_io_error is not None:
            self._on_io_error(self.parent_dir, exc)
        return LogDirOfflineError(
            f"{self.tp}: {what} failed in {self.directory}: {exc}; the log directory "
            f"{self.parent_dir} is now offline"
        )

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        self._check_usable()
        try:
            yield
        except OSError as exc:
            raise self._io_failed(what, exc) from exc

    def mark_offline(self) -> None:
        self._offline = True

    # -- append --------------------------------------------------------------------------------
    def append(
        self, data: bytes | bytearray | memoryview, *, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Validate, assign offsets from the log end offset, roll if needed, append.

        Nothing is written unless every batch of ``data`` is valid. (The hot path: the I/O guard
        is spelled out rather than taken from the ``_io`` context manager, which costs more.)
        """
        with self._lock:
            self._check_usable()
            try:
                return self._append_locked(data, origin)
            except OSError as exc:
                raise self._io_failed(f"append to {self.tp}", exc) from exc

    def _append_locked(
        self, data: bytes | bytearray | memoryview, origin: AppendOrigin
    ) -> LogAppendInfo:
        now_ms = self.clock.milliseconds()
        config = self._config
        validated = validate_and_assign_offsets(
            data,
            tp=self.tp,
            config=config,
            next_offset=self.log_end_offset,
            now_ms=now_ms,
            origin=origin,
            partition_leader_epoch=self.leader_epoch,
        )
        size = len(validated.buffer)
        if size > config.segment_bytes:
            raise RecordTooLargeError(
                f"{self.tp}: append of {size} bytes exceeds segment.bytes={config.segment_bytes}"
            )
        segment = self._maybe_roll(
            size, validated.first_offset, validated.last_offset, validated.max_timestamp, now_ms
        )
        segment.append(
            validated.last_offset,
            validated.max_timestamp,
            validated.shallow_offset_of_max_timestamp,
            validated.buffer,
        )
        if validated.last_offset + 1 - self._recovery_point >= config.flush_messages:
            self._flush(validated.last_offset + 1)
        return LogAppendInfo(
            first_offset=validated.first_offset,
            last_offset=validated.last_offset,
            max_timestamp=validated.max_timestamp,
            shallow_offset_of_max_timestamp=validated.shallow_offset_of_max_timestamp,
            log_append_time=validated.log_append_time,
            log_start_offset=self._log_start_offset,
            record_count=validated.record_count,
            valid_bytes=size,
        )

    def _maybe_roll(
        self, size: int, first_offset: int, last_offset: int, max_timestamp: int, now_ms: int
    ) -> LogSegment:
        segment = self.active_segment
        params = RollParams(
            max_segment_ms=self._config.max_segment_ms,
            max_segment_bytes=self._config.segment_bytes,
            max_timestamp_in_messages=max_timestamp,
            max_offset_in_messages=last_offset,
            messages_size=size,
            now_ms=now_ms,
        )
        if segment.should_roll(params):
            logger.debug(
                "%s: rolling segment %d (size %d)", self.tp, segment.base_offset, segment.size_bytes
            )
            return self._roll(first_offset)
        return segment

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, log end offset)``."""
        with self._lock, self._io(f"roll {self.tp}"):
            return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None) -> LogSegment:
        now_ms = self.clock.milliseconds()
        new_offset = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if active.base_offset == new_offset:
            if active.size_bytes == 0:
                return active  # KAFKA-6388: an empty active segment at that base is reused
            raise AssertionError(
                f"{self.tp}: a segment with base offset {new_offset} already exists"
            )
        for path in (
            files.log_file(self.directory, new_offset),
            files.index_file(self.directory, new_offset),
            files.time_index_file(self.directory, new_offset),
            files.txn_index_file(self.directory, new_offset),
        ):
            if path.exists():
                logger.warning("%s: deleting stale file %s before rolling", self.tp, path)
                path.unlink()
        active.on_become_inactive_segment()
        segment = LogSegment.open(
            self.directory,
            new_offset,
            index_interval_bytes=self._config.index_interval_bytes,
            max_index_size_bytes=self._config.segment_index_bytes,
            now_ms=now_ms,
            rolling_jitter_ms=self._rolling_jitter_ms(),
        )
        self._segments.append(segment)
        self._bases.append(new_offset)
        logger.info("%s: rolled new log segment at offset %d", self.tp, new_offset)
        # Kafka schedules this flush asynchronously; the roll is rare enough to do it here.
        self._flush(new_offset)
        return segment

    def _rolling_jitter_ms(self) -> int:
        jitter = self._config.segment_jitter_ms
        if jitter <= 0:
            return 0
        return random.randrange(min(jitter, self._config.segment_ms))

    # -- flush ---------------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: all); advance the
        recovery point to it."""
        with self._lock, self._io(f"flush {self.tp}"):
            self._flush(self.log_end_offset if offset is None else offset)

    def _flush(self, offset: int) -> None:
        if offset <= self._recovery_point:
            return
        for segment in self._segments_overlapping(self._recovery_point, offset):
            segment.flush()
        self._recovery_point = min(offset, self.log_end_offset)
        self.last_flush_ms = self.clock.milliseconds()

    def _segments_overlapping(self, start: int, end: int) -> list[LogSegment]:
        first = max(bisect.bisect_right(self._bases, start) - 1, 0)
        last = bisect.bisect_left(self._bases, end)
        return self._segments[first:last] if last > first else self._segments[first : first + 1]

    # -- read ----------------------------------------------------------------------------------
    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        min_one_message: bool = True,
        max_offset: int | None = None,
        region_min_bytes: int | None = None,
    ) -> FetchResult:
        """Whole batches from the one holding ``start_offset`` (Kafka ``UnifiedLog.read``).

        Raises :class:`OffsetOutOfRangeError` outside ``[log start, log end]``. At the log end
        the result is empty. ``max_offset`` bounds what is exposed (an isolation level). A
        read of at least ``region_min_bytes`` (None: never) is returned as a
        :class:`FileRegion` for ``sendfile`` (Kafka's zero-copy fetch path).
        """
        with self._lock:
            self._check_usable()
            try:
                return self._read_locked(
                    start_offset, max_bytes, min_one_message, max_offset, region_min_bytes
                )
            except OSError as exc:
                raise self._io_failed(f"read from {self.tp}", exc) from exc

    def _read_locked(
        self,
        start_offset: int,
        max_bytes: int,
        min_one_message: bool,
        max_offset: int | None,
        region_min_bytes: int | None,
    ) -> FetchResult:
        log_end = self.log_end_offset
        if start_offset < self._log_start_offset or start_offset > log_end:
            raise OffsetOutOfRangeError(
                f"{self.tp}: offset {start_offset} is outside [{self._log_start_offset}, {log_end}]"
            )
        upper = log_end if max_offset is None else min(max_offset, log_end)

        def result(
            records: bytes,
            incomplete: bool = False,
            next_offset: int = -1,
            region: FileRegion | None = None,
        ) -> FetchResult:
            return FetchResult(
                records,
                start_offset,
                self._log_start_offset,
                log_end,
                log_end,
                incomplete,
                start_offset if next_offset < 0 else next_offset,
                region,
            )

        if start_offset >= upper:
            return result(b"")
        index = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        while index < len(self._segments):
            segment = self._segments[index]
            max_position = segment.size_bytes
            if upper < segment.next_offset():
                header = segment.translate_offset(upper)
                if header is not None and header.base_offset >= upper:
                    max_position = header.position
            data = segment.read(
                start_offset, max_bytes, max_position, min_one_message, region_min_bytes
            )
            if data is not None:
                return result(
                    data.records, data.first_entry_incomplete, data.next_offset, data.region
                )
            index += 1
        return result(b"")

    def records(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        include_control: bool = False,
        fetch_bytes: int = 1 << 20,
    ) -> Iterator[Record]:
        """Every record in ``[start_offset, end_offset)``, decoded (a convenience over read)."""
        offset = self._log_start_offset if start_offset is None else start_offset
        end = self.log_end_offset if end_offset is None else end_offset
        while offset < end:
            fetch = self.read(offset, fetch_bytes)
            if not fetch.records:
                return
            advanced = offset
            for _, batch in iter_complete_batches(fetch.records):
                batch.validate()
                if include_control or not batch.is_control:
                    for record in batch.records():
                        if offset <= record.offset < end:
                            yield record
                advanced = batch.next_offset
            if advanced <= offset:
                raise AssertionError(f"{self.tp}: read at {offset} made no progress")
            offset = advanced

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """Kafka ListOffsets: -2 earliest, -1 latest, -3 max timestamp, else the first record
        with a timestamp >= ``timestamp``. None when no record qualifies."""
        with self._lock, self._io(f"offset lookup in {self.tp}"):
            if timestamp == EARLIEST_TIMESTAMP:
                return TimestampOffset(NO_TIMESTAMP, self._log_start_offset)
            if timestamp == LATEST_TIMESTAMP:
                return TimestampOffset(NO_TIMESTAMP, self.log_end_offset)
            if timestamp == MAX_TIMESTAMP:
                return self._offset_of_max_timestamp()
            if timestamp < 0:
                raise ValueError(f"{self.tp}: invalid target timestamp {timestamp}")
            for segment in self._segments:
                if segment.size_bytes and segment.largest_timestamp >= timestamp:
                    found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                    if found is not None:
                        return found
            return None

    def _offset_of_max_timestamp(self) -> TimestampOffset | None:
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp_so_far >= 0 and (
                best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
            ):
                best = segment
        if best is None:
            return None
        target = best.max_timestamp_so_far
        position = best.offset_index.lookup(best.offset_of_max_timestamp_so_far).position
        for _, batch in best.log.batches(position):
            if batch.max_timestamp == target:
                for record in batch.records():
                    if record.timestamp == target and record.offset >= self._log_start_offset:
                        return TimestampOffset(record.timestamp, record.offset)
        return None

    # -- log start offset and segment deletion -------------------------------------------------
    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str) -> bool:
        """Raise the log start offset (never lower it, never past the high watermark)."""
        with self._lock:
            if new_log_start_offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self.tp}: cannot move the log start offset to {new_log_start_offset}, "
                    f"past the high watermark {self.high_watermark}"
                )
            if new_log_start_offset <= self._log_start_offset:
                return False
            logger.info(
                "%s: incrementing log start offset from %d to %d (%s)",
                self.tp,
                self._log_start_offset,
                new_log_start_offset,
                reason,
            )
            self._log_start_offset = new_log_start_offset
            self._recovery_point = max(self._recovery_point, new_log_start_offset)
            return True

    def delete_records(self, offset: int) -> int:
        """Kafka DeleteRecords: records below ``offset`` are gone for readers at once; whole
        segments below it are deleted by retention. Returns the new log start offset."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self.tp}: cannot delete records before offset {offset}")
        self.maybe_increment_log_start_offset(offset, "delete-records")
        return self._log_start_offset

    # -- producers and transactions ---------------------------------------------------------
    def transaction_state(self) -> TransactionState:
        """Producer and transaction state of the whole log (a copy the caller may keep).

        Derived by walking batch headers (:mod:`storagecore.transactions`); the walk continues
        from where the last one stopped, and starts over after segments were removed or
        replaced.
        """
        with self._lock:
            return self._current_txn_state().copy()

    def _current_txn_state(self) -> TransactionState:
        with self._io(f"read producer state of {self.tp}"):
            state = self._txn_state if self._txn_state is not None else TransactionState()
            for segment in self._segments:
                if segment.next_offset() > state.next_offset:
                    state.extend(_header_batches(segment, state.next_offset))
            self._txn_state = state
            return state

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest undecided transaction, else the high watermark."""
        with self._lock:
            first_unstable = self._current_txn_state().first_unstable_offset
            hw = self.high_watermark
            return hw if first_unstable is None else min(first_unstable, hw)

    # -- retention -----------------------------------------------------------------------------
    def retention_view(self) -> list[SegmentView]:
        """The segments as retention sees them (sizes, offsets, largest timestamps)."""
        with self._lock, self._io(f"inspect {self.tp}"):
            return [
                SegmentView(s.base_offset, s.next_offset(), s.size_bytes, s.largest_timestamp)
                for s in self._segments
            ]

    def plan_retention(self, now_ms: int | None = None) -> RetentionPlan:
        """What retention would delete now, without deleting anything (a dry run)."""
        with self._lock:
            return plan_retention(
                self.tp,
                self.retention_view(),
                self._config,
                log_start_offset=self._log_start_offset,
                high_watermark=self.high_watermark,
                now_ms=self.clock.milliseconds() if now_ms is None else now_ms,
            )

    def delete_old_segments(self, now_ms: int | None = None) -> RetentionPlan:
        """Plan retention and carry it out under the log's lock (Kafka ``deleteOldSegments``)."""
        with self._lock:
            plan = self.plan_retention(now_ms)
            if plan.deletions:
                reasons = {
                    d.segment.base_offset: f"{d.rule.value}: {d.reason}" for d in plan.deletions
                }
                doomed = [s for s in self._segments if s.base_offset in reasons]
                self.delete_segments(doomed, reasons)
            return plan

    def delete_segments(
        self, segments: Sequence[LogSegment], reason: str | Mapping[int, str]
    ) -> int:
        """Remove segments from the log and schedule their files for deletion.

        Protocol (Kafka ``deleteSegments``): 1. if every segment would go, roll a new empty
        active segment first; 2. raise the log start offset to the first surviving base;
        3. drop the segments from the list (readers no longer see them); 4. rename their files to
        ``.deleted``; 5. unlink after ``file.delete.delay.ms`` (:meth:`delete_expired_files`).
        A crash after 4 leaves ``.deleted`` files that the loader removes.
        """
        with self._lock, self._io(f"delete segments of {self.tp}"):
            doomed = [s for s in segments if s in self._segments]
            if not doomed:
                return 0
            if len(doomed) == len(self._segments):
                self._roll(None)
                doomed = [s for s in doomed if s is not self.active_segment]
            doomed_ids = {id(s) for s in doomed}
            survivors = [s for s in self._segments if id(s) not in doomed_ids]
            assert survivors, f"{self.tp}: deleting every segment"
            self.maybe_increment_log_start_offset(
                survivors[0].base_offset, reason if isinstance(reason, str) else "retention"
            )
            self._segments = survivors
            self._bases = [s.base_offset for s in survivors]
            self._txn_state = None
            due_ms = self.clock.milliseconds() + self._config.file_delete_delay_ms
            for segment in doomed:
                logger.info(
                    "%s: deleting segment %d (%d bytes, largest timestamp %d): %s",
                    self.tp,
                    segment.base_offset,
                    segment.size_bytes,
                    segment.max_timestamp_so_far,
                    reason if isinstance(reason, str) else reason.get(segment.base_offset, ""),
                )
                segment.change_file_suffixes("", files.DELETED_SUFFIX)
                self._pending_deletes.append(_PendingDelete(due_ms, segment))
            if self._config.file_delete_delay_ms == 0:
                self._delete_expired_files(due_ms)
            return len(doomed)

    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> bool:
        """Swap cleaned segments in for the segments they replace (Kafka ``replaceSegments``).

        The new segments are complete, flushed and named ``*.cleaned``; together they hold a
        subset of the records of the old ones, at the same offsets. The protocol, mirrored by
        the loader's first two passes (:mod:`storagecore.loader`):

        1. rename each new segment ``.cleaned`` → ``.swap``, in **descending** base-offset order,
           then fsync the directory. Crash before all are renamed: the loader finds ``.cleaned``
           files, deletes them and every ``.swap`` at or above the lowest one → the old
           segments. Crash after: every new segment is ``.swap`` → the loader completes.
        2. replace the old segments by the new ones in the segment list (readers, which hold the
           log's lock, see either all old or all new segments).
        3. rename every old segment to ``.deleted`` (unlinked after ``file.delete.delay.ms``).
           Crash here: the loader deletes ``.deleted`` files and completes the ``.swap`` ones.
        4. strip ``.swap`` from the new segments' names, then fsync the directory. Crash here:
           the loader strips the remaining ``.swap`` suffixes.

        The active segment is never replaced (DESIGN invariant 2). Returns False, changing
        nothing, when some old segment left the log meanwhile.
        """
        with self._lock, self._io(f"replace segments of {self.tp}"):
            new = sorted(new_segments, key=lambda s: s.base_offset)
            present = {id(s) for s in self._segments}
            olds = [s for s in old_segments if id(s) in present]
            assert new, f"{self.tp}: nothing to replace with"
            if len(olds) != len(old_segments):
                # Some went meanwhile (retention or delete-records, KAFKA-7278). Kafka swaps in
                # what remains, which can bring back records below the log start offset; here
                # the cleaned copy is abandoned (the caller deletes it) and the next round redoes
                # the work. Returns False.
                logger.info(
                    "%s: %d of %d segments to replace are gone; discarding the cleaned copy",
                    self.tp,
                    len(old_segments) - len(olds),
                    len(old_segments),
                )
                return False
            assert self.active_segment not in olds, (
                f"{self.tp}: the active segment is never replaced"
            )
            low = min(s.base_offset for s in olds)
            high = max(s.next_offset() for s in olds)
            for segment in new:
                assert segment.log.path.name.endswith(files.CLEANED_SUFFIX), segment.log.path
                assert low <= segment.base_offset and segment.next_offset() <= high, (
                    f"{self.tp}: replacement segment {segment.base_offset} outside [{low}, {high})"
                )
            # 1. .cleaned -> .swap, highest offset first; then make the renames durable.
            for segment in reversed(new):
                segment.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
            durability.fsync_dir(self.directory)
            # 2. the new segment list.
            old_ids = {id(s) for s in olds}
            kept = [s for s in self._segments if id(s) not in old_ids]
            self._segments = sorted(kept + new, key=lambda s: s.base_offset)
            self._bases = [s.base_offset for s in self._segments]
            self._txn_state = None
            # 3. old segments -> .deleted, unlinked later.
            due_ms = self.clock.milliseconds() + self._config.file_delete_delay_ms
            for segment in olds:
                segment.change_file_suffixes("", files.DELETED_SUFFIX)
                self._pending_deletes.append(_PendingDelete(due_ms, segment))
            # 4. strip .swap; the directory fsync makes the final names durable.
            for segment in new:
                segment.change_file_suffixes(files.SWAP_SUFFIX, "")
            durability.fsync_dir(self.directory)
            logger.info(
                "%s: replaced segments %s with %s",
                self.tp,
                [s.base_offset for s in olds],
                [s.base_offset for s in new],
            )
            if self._config.file_delete_delay_ms == 0:
                self._delete_expired_files(due_ms)
            return True

    def bulk_append(
        self, batches: Iterable[bytes | bytearray | memoryview]
    ) -> LogAppendInfo | None:
        """Append ``batches`` all or nothing, even across a crash (offline bulk loads).

        The batches (built by the caller; offsets are reassigned from the log end offset, the
        base-offset field lies outside the CRC) are written into new segments named
        ``*.cleaned`` after the log end, and swapped in with the protocol of
        :meth:`replace_segments`, the empty active segment being the one replaced:

        1. roll, so the active segment is empty at the log end offset ``L``;
        2. write ``L.log.cleaned`` (and more segments when ``segment.bytes`` is reached), flush.
           Crash here: the loader deletes ``.cleaned`` files → the log as it was;
        3. rename them ``.cleaned`` → ``.swap``, highest first, fsync the directory. This is
           the commit point: from here the loader completes the swap (it deletes the segments
           in the swapped range, here only the empty one at ``L``);
        4. rename the empty active segment ``.deleted``, strip ``.swap``, fsync the directory;
           roll a new active segment at the new log end.

        Returns None when ``batches`` is empty. Raises :class:`RecordTooLargeError` naming the
        partition for a batch above ``max.message.bytes``; nothing is appended then.
        """
        pending = iter(batches)
        head = next(pending, None)
        if head is None:
            return None
        with self._lock, self._io(f"bulk append to {self.tp}"):
            self._check_usable()
            now_ms = self.clock.milliseconds()
            config = self._config
            self._roll(None)
            active = self.active_segment
            assert active.size_bytes == 0 and active.base_offset == self.log_end_offset
            new: list[LogSegment] = []
            first = next_offset = self.log_end_offset
            max_timestamp = layout.NO_TIMESTAMP
            offset_of_max = -1
            count = 0
            size_total = 0
            try:
                for data in itertools.chain((head,), pending):
                    batch = RecordBatch(bytes(data))
                    batch.validate()
                    size = batch.size_bytes
                    if size > config.max_message_bytes:
                        raise RecordTooLargeError(
                            f"{self.tp}: batch of {size} bytes exceeds max.message.bytes="
                            f"{config.max_message_bytes}"
                        )
                    delta = batch.last_offset_delta
                    if not new or new[-1].size_bytes + size > config.segment_bytes:
                        if new:
                            new[-1].on_become_inactive_segment()
                        new.append(
                            LogSegment.open(
                                self.directory,
                                next_offset,
                                index_interval_bytes=config.index_interval_bytes,
                                max_index_size_bytes=config.segment_index_bytes,
                                now_ms=now_ms,
                                suffix=files.CLEANED_SUFFIX,
                            )
                        )
                    buffer = bytearray(batch.buffer)
                    _BASE_OFFSET.pack_into(buffer, layout.BASE_OFFSET_OFFSET, next_offset)
                    last = next_offset + delta
                    new[-1].append(last, batch.max_timestamp, last, buffer)
                    if batch.max_timestamp > max_timestamp:
                        max_timestamp, offset_of_max = batch.max_timestamp, last
                    count += batch.records_count
                    size_total += size
                    next_offset = last + 1
                new[-1].on_become_inactive_segment()
                for segment in new:
                    segment.flush()
            except BaseException:
                for segment in new:
                    segment.delete_files()  # still .cleaned: nothing refers to them
                raise
            # 3. the commit point.
            for segment in reversed(new):
                segment.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
            durability.fsync_dir(self.directory)
            # 4. the empty active segment goes; the new ones take its place and follow it.
            active.change_file_suffixes("", files.DELETED_SUFFIX)
            active.delete_files()
            for segment in new:
                segment.change_file_suffixes(files.SWAP_SUFFIX, "")
            durability.fsync_dir(self.directory)
            self._segments = [*self._segments[:-1], *new]
            self._bases = [s.base_offset for s in self._segments]
            self._txn_state = None
            self._roll(None)
            self._recovery_point = self.log_end_offset
            logger.info(
                "%s: bulk-appended offsets [%d, %d) in %d segment(s)",
                self.tp,
                first,
                next_offset,
                len(new),
            )
            return LogAppendInfo(
                first_offset=first,
                last_offset=next_offset - 1,
                max_timestamp=max_timestamp,
                shallow_offset_of_max_timestamp=offset_of_max,
                log_append_time=layout.NO_TIMESTAMP,
                log_start_offset=self._log_start_offset,
                record_count=count,
                valid_bytes=size_total,
            )

    def delete_expired_files(self, *, force: bool = False) -> int:
        """Unlink ``.deleted`` segment files whose delay has passed (with ``force``: all of them,
        for a process that knows no reader holds them); return how many segments."""
        with self._lock:
            return self._delete_expired_files(2**63 - 1 if force else self.clock.milliseconds())

    def _delete_expired_files(self, now_ms: int) -> int:
        due = [p for p in self._pending_deletes if p.due_ms <= now_ms]
        self._pending_deletes = [p for p in self._pending_deletes if p.due_ms > now_ms]
        for pending in due:
            pending.segment.delete_files()
        return len(due)

    @property
    def pending_deletes(self) -> int:
        return len(self._pending_deletes)

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close every segment (trimming indexes). Does not flush: callers flush first."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._segments:
                if self._offline:
                    segment.close_handles()
                else:
                    segment.close()
            for pending in self._pending_deletes:
                pending.segment.close_handles()

    def close_handles(self) -> None:
        """Drop file handles without writing anything (what a crash leaves behind)."""
        with self._lock:
            self._closed = True
            for segment in self._segments:
                segment.close_handles()
            for pending in self._pending_deletes:
                pending.segment.close_handles()


def _header_batches(segment: LogSegment, from_offset: int) -> Iterator[RecordBatch]:
    """Batches of ``segment`` from the one holding ``from_offset``: header-only views, except
    control batches, which are read whole (their record says COMMIT or ABORT)."""
    start = segment.translate_offset(from_offset) if from_offset > segment.base_offset else None
    position = start.position if start is not None else 0
    for header, view in segment.log.header_views(position):
        if view[layout.ATTRIBUTES_OFFSET + 1] & layout.CONTROL_FLAG_MASK:
            batch = RecordBatch(segment.log.read(header.position, header.size_bytes))
            batch.validate()
            yield batch
        else:
            yield RecordBatch(view)
