"""The part of a Log that moves its start and deletes its segments (Kafka's UnifiedLog:
``maybeIncrementLogStartOffset``, ``deleteRecords``, ``deleteOldSegments``, ``deleteSegments``
and the file-deletion task): a base class of :class:`storagecore.log.Log`, apart because it is
one concept of that large class, with the state it reads declared here.

The retention rules themselves (what is due) are :func:`storagecore.retention.plan_retention`'s;
the list surgery and the ``.deleted`` renames are :class:`storagecore.local_log.LocalLog`'s.
What must not be here: appends, reads, producer-state updates other than the ones a deletion
implies (dropping snapshots, forgetting the transaction walk).

Thread-safety: every public method takes the log's lock, as the Log's own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from storagecore.clock import Clock
from storagecore.config import TopicPartition
from storagecore.errors import OffsetOutOfRangeError
from storagecore.local_log import LocalLog
from storagecore.log_transactions import LogTransactions
from storagecore.producer_state import ProducerStateManager
from storagecore.retention import RetentionPlan, SegmentView, plan_retention
from storagecore.segment import LogSegment

# The Log's logger: what a deletion logs reads as the log's own, as before the split.
logger = logging.getLogger("storagecore.log")


class SegmentDeletion:
    """Log start offset, retention and segment deletion of a :class:`storagecore.log.Log`."""

    # The owning Log's state (set by Log.__init__).
    tp: TopicPartition
    clock: Clock
    producer_state: ProducerStateManager
    _lock: threading.RLock
    _local: LocalLog
    _txns: LogTransactions
    _log_start_offset: int

    @property
    def high_watermark(self) -> int:
        """One replica: everything appended is committed: the log end offset."""
        return self._local.log_end_offset

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
            self.producer_state.on_log_start_offset_incremented(new_log_start_offset)
            self._local.recovery_point = max(self._local.recovery_point, new_log_start_offset)
            return True

    def delete_records(self, offset: int) -> int:
        """Kafka DeleteRecords: records below ``offset`` are gone for readers at once; whole
        segments below it are deleted by retention. Returns the new log start offset."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self.tp}: cannot delete records before offset {offset}")
        self.maybe_increment_log_start_offset(offset, "delete-records")
        return self._log_start_offset

    # -- retention and deletion ------------------------------------------------------------
    def retention_view(self) -> list[SegmentView]:
        """The segments as retention sees them (sizes, offsets, largest timestamps)."""
        with self._lock, self._local.io(f"inspect {self.tp}"):
            return [
                SegmentView(
                    s.base_offset,
                    s.next_offset,
                    s.size_bytes,
                    lambda s=s: s.largest_timestamp,  # type: ignore[misc]
                )
                for s in self._local.segments
            ]

    def plan_retention(self, now_ms: int | None = None) -> RetentionPlan:
        """What retention would delete now, without deleting anything (a dry run)."""
        # The views read a segment's files on first use: the I/O guard covers the plan too.
        with self._lock, self._local.io(f"plan retention of {self.tp}"):
            return plan_retention(
                self.tp,
                self.retention_view(),
                self._local.config,
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
                doomed = [s for s in self._local.segments if s.base_offset in reasons]
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
        Steps 3-5 are :meth:`LocalLog.remove_and_delete_segments`. A crash after 4 leaves
        ``.deleted`` files that the loader removes.
        """
        with self._lock, self._local.io(f"delete segments of {self.tp}"):
            local = self._local
            doomed = [s for s in segments if s in local.segments]
            if not doomed:
                return 0
            # 1.
            if len(doomed) == len(local.segments):
                local.roll(None)
                doomed = [s for s in doomed if s is not local.active_segment]
            doomed_ids = {id(s) for s in doomed}
            first_survivor = next((s for s in local.segments if id(s) not in doomed_ids), None)
            assert first_survivor is not None, f"{self.tp}: deleting every segment"
            # 2.
            self.maybe_increment_log_start_offset(
                first_survivor.base_offset, reason if isinstance(reason, str) else "retention"
            )
            # 3.-5.
            local.remove_and_delete_segments(doomed, reason)
            self.producer_state.delete_snapshots(s.base_offset for s in doomed)
            self._txns.forget()
            return len(doomed)

    def delete_expired_files(self, *, force: bool = False) -> int:
        """Unlink ``.deleted`` segment files whose delay has passed (with ``force``: all of them,
        for a process that knows no reader holds them); return how many segments."""
        with self._lock:
            return self._local.delete_expired_files(
                2**63 - 1 if force else self.clock.milliseconds()
            )

    def take_expired_files(self, *, force: bool = False) -> list[LogSegment]:
        """As :meth:`delete_expired_files`, but the caller unlinks the segments' files
        (``LogSegment.delete_files``, which needs no lock: they left the log)."""
        with self._lock:
            return self._local.take_expired_files(2**63 - 1 if force else self.clock.milliseconds())

    @property
    def pending_deletes(self) -> int:
        return self._local.pending_deletes
