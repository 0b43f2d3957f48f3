"""One partition's log as its users see it (Kafka's UnifiedLog; there is one replica, so the
high watermark is the log end offset): append, read, offsets by time, the log start offset,
producer and transaction state, retention, bulk appends. The log start offset, retention and
segment deletion are written in :class:`storagecore.segment_deletion.SegmentDeletion` and the
reads in :class:`storagecore.log_reads.LogReads`, the base classes of :class:`Log`; the native
append in :mod:`storagecore.native_append`.

The segment list and the protocols that change the directory's files (roll, delete, swap) are
:class:`storagecore.local_log.LocalLog`'s; a Log owns one and holds the lock it needs.

Thread-safety: every public method takes the log's lock. Reads hold it too; they are short.

Invariants (DESIGN.md 1 and 3; the segment list's own are in :mod:`storagecore.local_log`):
* ``log_start_offset <= recovery_point <= log_end_offset``, and every offset below the recovery
  point is fsynced: an acknowledged, flushed append survives a crash;
* an I/O error takes the log offline: nothing is read or written after it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from storagecore import files, native_append
from storagecore.clock import Clock
from storagecore.config import LogConfig, TopicPartition
from storagecore.errors import (
    RecordBatchTooLargeError,
    ResourceExhaustedError,
)
from storagecore.file_cache import FileCache
from storagecore.loader import load_log
from storagecore.local_log import IoErrorCallback, LocalLog
from storagecore.log_info import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchResult,
    LogAppendInfo,
)
from storagecore.log_reads import LogReads
from storagecore.log_transactions import LogTransactions
from storagecore.log_validator import AppendOrigin, ValidatedRecords, validate_and_assign_offsets
from storagecore.producer_state import PendingAppend, ProducerStateManager
from storagecore.roll_flush import FlushScheduler, roll_and_schedule_flush
from storagecore.roll_params import RollParams, should_roll
from storagecore.segment import LogSegment
from storagecore.segment_deletion import SegmentDeletion
from storagecore.transactions import AbortedTxn, ProducerLastBatch, TransactionState

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchResult",
    "IoErrorCallback",
    "Log",
    "LogAppendInfo",
]

logger = logging.getLogger(__name__)

# Module constants: an Enum member looked up on its class costs ~40 ns a time.
_CLIENT = AppendOrigin.CLIENT
_REPLICATION = AppendOrigin.REPLICATION
#: The length of a written native append's result (six ints: storagecore.records.scan's
#: AppendToSegment), and of ValidatedRecords' fields at the head of an unwritten one.
_WRITTEN_FIELDS = 6
_VALIDATED_FIELDS = 8


class Log(SegmentDeletion, LogReads):
    # Read at their offsets by the native common case of append (records/_log_append.c).
    __slots__ = ("_local", "_lock", "_log_start_offset", "clock", "leader_epoch", "producer_state")

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
        on_disk_full: IoErrorCallback | None = None,
        leader_epoch: int = 0,
        producer_state: ProducerStateManager | None = None,
        flush_scheduler: FlushScheduler | None = None,
    ) -> None:
        self.directory = directory
        self._parent_dir = directory.parent
        self.tp = tp
        self.clock = clock
        self.producer_state = producer_state or ProducerStateManager(directory, tp, clock)
        self._local = LocalLog(
            directory, tp, config, clock, segments, recovery_point, on_io_error, on_disk_full
        )
        self._local.on_roll = self.producer_state.on_roll  # a snapshot at every roll
        #: Runs the flush of a segment an append rolled later, on another thread
        #: (storagecore.roll_flush); None: the roll flushes before the append returns.
        self.flush_scheduler = flush_scheduler
        self._log_start_offset = log_start_offset
        self.leader_epoch = leader_epoch
        self._lock = threading.RLock()
        self._txns = LogTransactions(self._local, self.producer_state)
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
        on_disk_full: IoErrorCallback | None = None,
        file_cache: FileCache | None = None,
        flush_scheduler: FlushScheduler | None = None,
        defer_delete: Callable[[Path], None] | None = None,
    ) -> Log:
        """Load (and if needed recover) the log in ``directory``, creating it if absent. With
        ``file_cache`` its segments' files open through that cache (storagecore.file_cache);
        ``defer_delete`` takes the stray ``.deleted`` files (storagecore.loader.load_log)."""
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
            file_cache=file_cache,
            defer_delete=defer_delete,
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
            on_disk_full=on_disk_full,
            producer_state=loaded.producer_state,
            flush_scheduler=flush_scheduler,
        )

    # -- state ---------------------------------------------------------------------------------
    @property
    def config(self) -> LogConfig:
        return self._local.config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._local.update_config(config)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._local.segments)

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    @property
    def offline(self) -> bool:
        return self._local.offline

    @property
    def parent_dir(self) -> Path:
        """The log dir holding this partition's directory (asked on every append by
        LogManager.ensure_writable; made once: the directory of a Log never changes)."""
        return self._parent_dir

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._local.recovery_point

    def __repr__(self) -> str:
        return f"Log({self.tp}, dir={self.directory})"

    def mark_offline(self) -> None:
        self._local.offline = True

    # -- append --------------------------------------------------------------------------------
    def append(
        self, data: bytes | bytearray | memoryview, *, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Validate, assign offsets from the log end offset, roll if needed, append.

        Nothing is written unless every batch of ``data`` is valid. A client's request of
        uncompressed (or lz4) batches without producer ids, to an active segment whose files are
        held, is appended in one native call, these steps without a Python frame
        (:data:`storagecore.native_append.append_active`); anything else, or anything that call
        leaves (it then did nothing), takes the steps below. (The hot path: the I/O guard is
        spelled out rather than taken from the ``_io`` context manager, which costs more.)
        """
        if origin is _CLIENT:
            active = native_append.append_active  # read per call: tests turn it off
            if active is not None:
                info = active(self, data)
                if info is not None:
                    return info
        with self._lock:
            local = self._local
            if local.offline or local.closed:
                local.check_usable()  # raises
            for attempt in (1, 2):
                # The active segment's files stay pinned open throughout (a descriptor that
                # cannot be had fails the append before anything is written): held from one
                # append to the next while the cache has room for it, else pinned for this one.
                segment = local.segments[-1]
                try:
                    held = segment.held_log
                    if held is not None and held.held:
                        fd, pinned = held.fd, False
                    else:
                        fd = local.hold_active(segment)
                        pinned = fd < 0
                        if pinned:
                            fd = segment.pin_files()
                    try:
                        now_ms = self.clock.milliseconds()
                        settings = local.native_append
                        call = native_append.append_to_segment  # read per call: tests turn it off
                        done = (
                            None
                            if settings is None or call is None
                            else call(
                                settings,
                                segment,
                                fd,
                                data,
                                now_ms,
                                origin is _CLIENT,
                                origin is _REPLICATION,
                                self.leader_epoch,
                            )
                        )
                        if done is None:
                            return self._append_locked(data, origin, now_ms, None)
                        if len(done) != _WRITTEN_FIELDS:  # valid, not written
                            validated = ValidatedRecords(*done[:_VALIDATED_FIELDS])
                            if done[_VALIDATED_FIELDS]:  # kept back only by its producer ids
                                return self._append_producers(
                                    segment, fd, validated, origin, now_ms
                                )
                            return self._append_locked(data, origin, now_ms, validated)
                        # Written by the native append, in this one frame (the common case).
                        first, last, max_timestamp, offset_of_max, records, size = done
                        self.producer_state.map_end_offset = last + 1  # no producers to update
                        if last + 1 - local.recovery_point >= local.flush_messages:
                            self._flush_appended(last + 1)
                        # tuple.__new__: what LogAppendInfo's own (Python) __new__ does, a
                        # frame less; every field in order, duplicate=False last.
                        return tuple.__new__(
                            LogAppendInfo,
                            (
                                first,
                                last,
                                max_timestamp,
                                offset_of_max,
                                -1,
                                self._log_start_offset,
                                records,
                                size,
                                False,
                            ),
                        )
                    finally:
                        if pinned:
                            segment.unpin_files()
                except OSError as exc:
                    error = local.io_failed(f"append to {self.tp}", exc, append=True)
                    if attempt == 2 or not isinstance(error, ResourceExhaustedError):
                        raise error from exc
                # Out of descriptors or memory: the cache shed idle files (io_failed); the
                # descriptors were pinned before anything was written, so once more is safe.
            raise AssertionError("unreachable")

    def _append_locked(
        self,
        data: bytes | bytearray | memoryview,
        origin: AppendOrigin,
        now_ms: int,
        validated: ValidatedRecords | None,
    ) -> LogAppendInfo:
        """The general path, Kafka's steps one by one: for what the native append did not
        take (``validated`` None) or handed back validated but unwritten (producers, a roll)."""
        if validated is None:
            validated = validate_and_assign_offsets(
                data,
                tp=self.tp,
                config=self._local.config,
                next_offset=self.log_end_offset,
                now_ms=now_ms,
                origin=origin,
                partition_leader_epoch=self.leader_epoch,
            )
        producers = self.producer_state.prepare_append(validated, origin)
        return self._write_locked(validated, producers, now_ms)

    def _append_producers(
        self,
        segment: LogSegment,
        fd: int,
        validated: ValidatedRecords,
        origin: AppendOrigin,
        now_ms: int,
    ) -> LogAppendInfo:
        """Batches with producer ids that the native append validated and found to fit the
        active ``segment`` (pinned; ``fd`` its ``.log``): the producer checks (a duplicate
        answers with its original's offsets, a bad sequence raises), then the native write.
        Markers that complete a transaction (the ``.txnindex``) take the general path's
        write."""
        producers = self.producer_state.prepare_append(validated, origin)
        settings = self._local.native_append
        write = native_append.write_to_segment  # read per call: tests turn it off
        if (
            producers is None
            or producers.duplicate is not None
            or producers.completed
            or settings is None
            or write is None
        ):
            return self._write_locked(validated, producers, now_ms)
        size = write(
            settings,
            segment,
            fd,
            validated.buffer,
            validated.first_offset,
            validated.last_offset,
            validated.max_timestamp,
            validated.shallow_offset_of_max_timestamp,
            now_ms,
        )
        if size is None:  # no longer fits (nothing is expected to change it): the general way
            return self._write_locked(validated, producers, now_ms)
        return self._appended(validated, producers, size)

    def _write_locked(
        self, validated: ValidatedRecords, producers: PendingAppend | None, now_ms: int
    ) -> LogAppendInfo:
        """The general path's write of validated batches whose producer checks are done: a
        duplicate's answer, or the roll, the write (and ABORT markers' ``.txnindex``), the
        producer updates and the flush, one step at a time."""
        config = self._local.config
        if producers is not None and producers.duplicate is not None:
            return producers.duplicate_info(self._log_start_offset)
        size = len(validated.buffer)
        if size > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"{self.tp}: append of {size} bytes exceeds segment.bytes={config.segment_bytes}"
            )
        segment = self._maybe_roll(
            size, validated.first_offset, validated.last_offset, validated.max_timestamp, now_ms
        )
        self._txns.append(segment, validated, producers)  # and ABORT markers' .txnindex
        return self._appended(validated, producers, size)

    def _appended(
        self, validated: ValidatedRecords, producers: PendingAppend | None, size: int
    ) -> LogAppendInfo:
        """After the write of ``validated`` (``size`` bytes): the producer updates, the flush
        that ``flush.messages`` asks for, the answer."""
        next_offset = validated.last_offset + 1
        self.producer_state.complete_append(producers, next_offset)
        local = self._local
        if next_offset - local.recovery_point >= local.flush_messages:
            self._flush_appended(next_offset)
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

    def _flush_appended(self, offset: int) -> None:
        """The flush ``flush.messages`` asks for after an append that is written: an error is
        the log's (it goes offline), never the append's to retry, which would write the
        records twice."""
        local = self._local
        try:
            local.flush(offset)
        except OSError as exc:
            raise local.io_failed(f"flush {self.tp} after an append", exc) from exc

    def _maybe_roll(
        self, size: int, first_offset: int, last_offset: int, max_timestamp: int, now_ms: int
    ) -> LogSegment:
        segment = self.active_segment
        params = RollParams(
            max_segment_ms=self._local.config.max_segment_ms,
            max_segment_bytes=self._local.config.segment_bytes,
            max_timestamp_in_messages=max_timestamp,
            max_offset_in_messages=last_offset,
            messages_size=size,
            now_ms=now_ms,
        )
        if should_roll(segment, params):
            logger.debug(
                "%s: rolling segment %d (size %d)", self.tp, segment.base_offset, segment.size_bytes
            )
            if self.flush_scheduler is not None:
                return roll_and_schedule_flush(
                    self._local, self._lock, first_offset, self.flush_scheduler
                )
            return self._local.roll(first_offset)
        return segment

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, log end offset)``."""
        with self._lock, self._local.io(f"roll {self.tp}"):
            return self._local.roll(expected_next_offset)

    # -- flush ---------------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: all); advance the
        recovery point to it."""
        with self._lock, self._local.io(f"flush {self.tp}"):
            self._local.flush(self.log_end_offset if offset is None else offset)

    # -- producers and transactions ---------------------------------------------------------
    def transaction_state(self) -> TransactionState:
        """Producer and transaction state of the whole log (a copy the caller may keep), from
        a header walk that continues where the last one stopped (:mod:`storagecore.
        log_transactions`)."""
        with self._lock:
            return self._txns.state().copy()

    def last_records_of_active_producers(
        self, now_ms: int, expiration_ms: int
    ) -> dict[int, ProducerLastBatch]:
        """Each active producer's last data batch and epoch, which the cleaner keeps."""
        with self._lock:
            return self._txns.last_records_of_active_producers(now_ms, expiration_ms)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest undecided transaction, else the high watermark."""
        with self._lock:
            return self._txns.last_stable_offset(self.high_watermark)

    def open_transactions(self) -> int:
        """Producers with an undecided transaction in this log."""
        with self._lock:
            return self.producer_state.open_transactions()

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[start_offset, upper_offset)``
        must filter, in first-offset order: from the ``.txnindex`` files of the segments from
        the one holding ``start_offset`` on (Kafka's ``collectAbortedTransactions``)."""
        with self._lock:
            return self._txns.aborted(start_offset, upper_offset)

    def index_unindexed_segments(self) -> int:
        """Write the ``.txnindex`` files a log written without them lacks (the upgrade)."""
        with self._lock:
            return self._txns.index_unindexed_segments()

    # -- segment swaps ------------------------------------------------------------------------
    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> bool:
        """Swap cleaned segments in for the segments they replace (Kafka ``replaceSegments``).

        The new segments are complete, flushed and named ``*.cleaned``; together they hold a
        subset of the records of the old ones, at the same offsets. The active segment is never
        replaced. The protocol is :meth:`LocalLog.swap`'s. Returns False, changing nothing, when
        some old segment left the log meanwhile (the caller deletes its cleaned copy).
        """
        with self._lock, self._local.io(f"replace segments of {self.tp}"):
            swapped = self._local.replace_segments(new_segments, old_segments)
            if swapped:
                self.producer_state.delete_snapshots_of_replaced(new_segments, old_segments)
                self._txns.forget()
            return swapped

    def bulk_append(
        self, batches: Iterable[bytes | bytearray | memoryview]
    ) -> LogAppendInfo | None:
        """Append ``batches`` all or nothing, even across a crash (offline bulk loads), with
        offsets from the log end offset; the protocol is
        :func:`storagecore.bulk_append.bulk_append`'s.

        Returns None when ``batches`` is empty. Raises :class:`RecordTooLargeError` naming the
        partition for a batch above ``max.message.bytes``; nothing is appended then.
        """
        # Imported here: only the Spark pipeline's offline writes need it.
        from storagecore.bulk_append import bulk_append  # noqa: PLC0415

        pending = iter(batches)
        head = next(pending, None)
        if head is None:
            return None
        with self._lock, self._local.io(f"bulk append to {self.tp}"):
            written = bulk_append(self._local, itertools.chain((head,), pending))
            self._txns.bulk_appended(written.first_offset)
            return written.append_info(self._log_start_offset)

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Snapshot producer state, close every segment (trimming indexes); does not flush."""
        with self._lock:
            if not self._local.closed:
                if not self._local.offline:
                    self.producer_state.take_snapshot()  # at the log end, as Kafka's close
                self._local.close(handles_only=self._local.offline)

    def close_handles(self) -> None:
        """Drop file handles without writing anything (what a crash leaves behind)."""
        with self._lock:
            self._local.close(handles_only=True)
