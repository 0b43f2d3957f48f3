"""The segments of one partition directory and the protocols that change its files (Kafka's
LocalLog).

:class:`LocalLog` keeps the segment list, the recovery point and the segments waiting for their
files to be unlinked; it rolls, flushes, deletes and swaps segments, and walks them for reads.
Every multi-step change of the directory is written here once, as a numbered docstring on the
method that runs it, and mirrored by the loader's passes (:mod:`storagecore.loader`): rolling
(:meth:`LocalLog.roll`), segment deletion (:meth:`LocalLog.remove_and_delete_segments`, steps
3-5 of :meth:`storagecore.log.Log.delete_segments`) and the swap (:meth:`LocalLog.swap`,
written once, run by both :meth:`LocalLog.replace_segments`, the cleaner's, and
:func:`storagecore.bulk_append.bulk_append`). It also turns an I/O error into an offline log
(Kafka's ``maybeHandleIOException``).

What must not be here: offsets that the log's users see (the log start offset, producer state,
record validation and offset assignment, the bounds of reads, retention). Those are
:class:`storagecore.log.Log`'s (Kafka's UnifiedLog), which owns a LocalLog. Not thread-safe by
itself: callers hold the owning Log's lock.

Invariants (DESIGN.md 1 and 3):
* segments are sorted by base offset, contiguous in offsets, and the last one is the only one
  that is appended to;
* ``recovery_point <= log_end_offset``, and every offset below the recovery point is fsynced;
* a deleted or replaced segment leaves the segment list before its files are renamed to
  ``.deleted``, so it is never served again, and its files are unlinked only after
  ``file.delete.delay.ms``.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from storagecore import durability, files
from storagecore.clock import Clock
from storagecore.config import LogConfig, TopicPartition
from storagecore.disk_space import is_disk_full
from storagecore.errors import (
    LogDirFullError,
    LogDirOfflineError,
    ResourceExhaustedError,
    StorageError,
)
from storagecore.file_cache import is_resource_exhausted
from storagecore.index import TimestampOffset
from storagecore.log_info import FetchData
from storagecore.native_append import native_append_settings
from storagecore.segment import LogSegment

logger = logging.getLogger(__name__)

IoErrorCallback = Callable[[Path, OSError], None]
RollCallback = Callable[[Sequence[LogSegment], int, bool], None]
"""Called after every roll with the segments, the new active segment's base offset (the Log
snapshots its producer state there) and whether the roll flushed (if not, the snapshot is not
fsynced either: the roll's scheduled flush does both, storagecore.roll_flush)."""


@dataclasses.dataclass(slots=True)
class _PendingDelete:
    due_ms: int
    segment: LogSegment


class LocalLog:
    # The dict and weak references the class had without __slots__, and what the native
    # common case of Log.append reads at its offsets (records/_log_append.c).
    __slots__ = (
        "__dict__",
        "__weakref__",
        "closed",
        "flush_messages",
        "native_append",
        "offline",
        "recovery_point",
        "segments",
    )

    def __init__(  # noqa: PLR0917 - built by Log only
        self,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        clock: Clock,
        segments: Sequence[LogSegment],
        recovery_point: int,
        on_io_error: IoErrorCallback | None = None,
        on_disk_full: IoErrorCallback | None = None,
    ) -> None:
        assert segments, f"{tp}: a log has at least one segment"
        self.directory = directory
        self.tp = tp
        self.config = config
        self.clock = clock
        #: The live list, sorted by base offset; :attr:`bases` follows it.
        self.segments: list[LogSegment] = sorted(segments, key=lambda s: s.base_offset)
        self.bases: list[int] = [s.base_offset for s in self.segments]
        self.recovery_point = recovery_point
        self.last_flush_ms = clock.milliseconds()
        self._pending_deletes: list[_PendingDelete] = []
        self._on_io_error = on_io_error
        self._on_disk_full = on_disk_full
        #: Called after every roll (:data:`RollCallback`); the owning Log sets it.
        self.on_roll: RollCallback | None = None
        self.offline = False
        self.closed = False
        #: The cache the segments' files open through (storagecore.file_cache); None: each
        #: segment keeps its files open.
        self.file_cache = self.segments[0].file_cache
        #: The segment whose files :meth:`hold_active` holds, if any.
        self._held_segment: LogSegment | None = None

    # -- state ---------------------------------------------------------------------------------
    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._config = config
        #: The native append's settings under this config (storagecore.native_append); None: it
        #: never applies (LogAppendTime, recompression).
        self.native_append = native_append_settings(config)
        #: ``flush.messages``, read per append.
        self.flush_messages = config.flush_messages

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset()

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    @property
    def pending_deletes(self) -> int:
        return len(self._pending_deletes)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    def floor_index(self, offset: int) -> int:
        """Position in :attr:`segments` of the segment that would hold ``offset`` (0 below all)."""
        return max(bisect.bisect_right(self.bases, offset) - 1, 0)

    def find_offset_by_timestamp(
        self, timestamp: int, log_start_offset: int
    ) -> TimestampOffset | None:
        """The first record with a timestamp >= ``timestamp`` at or after the log start."""
        for segment in self.segments:
            if segment.size_bytes and segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
                if found is not None:
                    return found
        return None

    def find_max_timestamp(self, log_start_offset: int) -> TimestampOffset | None:
        """The record with the largest timestamp (the first of them)."""
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.max_timestamp_so_far >= 0 and (
                best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
            ):
                best = segment
        return None if best is None else best.find_max_timestamp(log_start_offset)

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self.segments = segments
        self.bases = [s.base_offset for s in segments]

    # -- I/O failures --------------------------------------------------------------------------
    def check_usable(self) -> None:
        if self.offline:
            raise LogDirOfflineError(
                f"{self.tp}: the log directory {self.directory.parent} is offline after an I/O "
                "error"
            )
        if self.closed:
            raise LogDirOfflineError(f"{self.tp}: the log is closed")

    def io_failed(self, what: str, exc: OSError, *, append: bool = False) -> StorageError:
        """An OSError takes the log (and through the callback its log dir) offline. On the
        append path (``append``) one that means "no space" (ENOSPC, EDQUOT) does not: the
        append left nothing behind (a short write is cut back, index blocks are reserved
        before the write), the disk-full callback notes it, and the caller gets a retriable
        :class:`LogDirFullError`. Elsewhere (a swap, a delete) it is an I/O error like any."""
        if append and is_disk_full(exc):
            if self._on_disk_full is not None:
                self._on_disk_full(self.directory.parent, exc)
            return LogDirFullError(
                f"{self.tp}: {what} failed in {self.directory}: {exc}; nothing was written, the "
                "log directory stays online and writes resume once space is free"
            )
        if is_resource_exhausted(exc):
            # Out of descriptors or memory: not the disk's fault. The cache sheds idle files;
            # this request fails (retriable), the log and its dir stay online.
            if self.file_cache is not None:
                self.file_cache.shed()
            return ResourceExhaustedError(
                f"{self.tp}: {what} failed in {self.directory}: {exc}; the request can be "
                "retried (idle files were closed), the log directory stays online"
            )
        if self._on_io_error is not None:
            self._on_io_error(self.directory.parent, exc)
        self.offline = True
        return LogDirOfflineError(
            f"{self.tp}: {what} failed in {self.directory}: {exc}; the log directory "
            f"{self.directory.parent} is now offline"
        )

    @contextlib.contextmanager
    def io(self, what: str) -> Iterator[None]:
        """Refuse work on an offline or closed log; an OSError inside takes it offline."""
        self.check_usable()
        try:
            yield
        except OSError as exc:
            raise self.io_failed(what, exc) from exc

    def hold_active(self, segment: LogSegment) -> int:
        """Hold the active ``segment``'s files for appends (:meth:`LogSegment.hold_files`),
        ending the hold of the segment held before it if it still has one (a roll ends it
        itself; a truncation or a swap closes it or leaves it to this); its descriptor, or -1
        when the file cache has no room to hold it."""
        previous = self._held_segment
        if previous is not None and previous is not segment:
            previous.release_held_files()
            self._held_segment = None
        fd = segment.hold_files()
        if fd >= 0:
            self._held_segment = segment
        return fd

    # -- roll ----------------------------------------------------------------------------------
    def roll(self, expected_next_offset: int | None, *, flush: bool = True) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, log end offset)``.

        1. an empty active segment at that base is reused (KAFKA-6388); a non-empty one there is
           a bug;
        2. stale files at the new base (left by a crash before the loader's time) are deleted;
        3. the old active segment writes its final time index entry and trims its indexes;
        4. the new segment's files are created and it joins the list;
        5. the old segment is flushed and the recovery point moves to the new base (with
           ``flush=False`` not here: :class:`storagecore.roll_flush.RollFlush` does it later on
           another thread, as Kafka's roll schedules its "flush-log" task);
        6. the roll callback runs (the Log's producer-state snapshot at the new base, not
           fsynced with ``flush=False``: the scheduled flush syncs it first).

        A crash anywhere leaves at most an empty segment at the log end, which the loader opens
        (and a ``.snapshot.tmp``, which it deletes). A crash before the scheduled flush is done
        leaves the recovery point below the old segment, which the loader then recovers.
        """
        now_ms = self.clock.milliseconds()
        new_offset = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if active.base_offset == new_offset:
            if active.size_bytes == 0:
                return active
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
        active.release_held_files()
        segment = LogSegment.open(
            self.directory,
            new_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
            rolling_jitter_ms=self._rolling_jitter_ms(),
            file_cache=self.file_cache,
        )
        self.segments.append(segment)
        self.bases.append(new_offset)
        logger.info("%s: rolled new log segment at offset %d", self.tp, new_offset)
        if flush:
            self.flush(new_offset)
        if self.on_roll is not None:
            self.on_roll(self.segments, new_offset, flush)
        return segment

    def _rolling_jitter_ms(self) -> int:
        jitter = self.config.segment_jitter_ms
        if jitter <= 0:
            return 0
        return random.randrange(min(jitter, self.config.segment_ms))

    # -- read ----------------------------------------------------------------------------------
    def read(
        self,
        start_offset: int,
        max_bytes: int,
        upper: int,
        min_one_message: bool,
        region_min_bytes: int | None,
    ) -> FetchData | None:
        """Whole batches from the one holding ``start_offset``, none at or after ``upper``
        (Kafka ``LocalLog.read``: the segment walk; the bounds are the caller's). None when no
        segment holds a batch reaching ``start_offset``."""
        segments = self.segments
        index = self.floor_index(start_offset)
        while index < len(segments):
            segment = segments[index]
            max_position = segment.size_bytes
            if upper < segment.next_offset():
                header = segment.translate_offset(upper)
                if header is not None and header.base_offset >= upper:
                    max_position = header.position
            data = segment.read(
                start_offset, max_bytes, max_position, min_one_message, region_min_bytes
            )
            if data is not None:
                return data
            index += 1
        return None

    # -- flush ---------------------------------------------------------------------------------
    def flush(self, offset: int) -> None:
        """fsync every segment holding offsets in ``[recovery point, offset)``, then advance the
        recovery point to ``offset`` (at most the log end)."""
        if offset <= self.recovery_point:
            return
        for segment in self._segments_overlapping(self.recovery_point, offset):
            segment.flush()
        self.mark_flushed(offset)

    def unflushed_paths(self, offset: int) -> list[Path]:
        """The files that :meth:`flush` up to ``offset`` would sync (with the transaction
        indexes), for a flush in two halves off the log's lock (:mod:`storagecore.roll_flush`):
        these synced by path, then :meth:`mark_flushed`. Empty when the recovery point is
        there already."""
        if offset <= self.recovery_point:
            return []
        return [
            path
            for segment in self._segments_overlapping(self.recovery_point, offset)
            for path in segment.file_paths()
        ]

    def mark_flushed(self, offset: int) -> None:
        """Everything below ``offset`` is synced: the recovery point moves there, never back
        (another flush may have passed it) and never past the log end (Kafka's
        ``markFlushed``)."""
        if offset > self.recovery_point:
            self.recovery_point = min(offset, self.log_end_offset)
            self.last_flush_ms = self.clock.milliseconds()

    def _segments_overlapping(self, start: int, end: int) -> list[LogSegment]:
        first = self.floor_index(start)
        last = bisect.bisect_left(self.bases, end)
        return self.segments[first:last] if last > first else self.segments[first : first + 1]

    # -- delete --------------------------------------------------------------------------------
    def remove_and_delete_segments(
        self, doomed: Sequence[LogSegment], reason: str | Mapping[int, str]
    ) -> None:
        """Steps 3-5 of segment deletion (:meth:`storagecore.log.Log.delete_segments` runs 1-2):

        3. drop the segments from the list (readers no longer see them);
        4. rename their files to ``.deleted``;
        5. unlink them after ``file.delete.delay.ms`` (:meth:`delete_expired_files`; at once
           when the delay is 0).

        A crash after 4 leaves ``.deleted`` files that the loader's first pass removes.
        """
        doomed_ids = {id(s) for s in doomed}
        survivors = [s for s in self.segments if id(s) not in doomed_ids]
        assert survivors, f"{self.tp}: deleting every segment"
        # 3.
        self._set_segments(survivors)
        due_ms = self.clock.milliseconds() + self.config.file_delete_delay_ms
        for segment in doomed:
            logger.info(
                "%s: deleting segment %d (%d bytes, largest timestamp %d): %s",
                self.tp,
                segment.base_offset,
                segment.size_bytes,
                segment.max_timestamp_so_far,
                reason if isinstance(reason, str) else reason.get(segment.base_offset, ""),
            )
            # 4.
            segment.change_file_suffixes("", files.DELETED_SUFFIX)
            self._pending_deletes.append(_PendingDelete(due_ms, segment))
        # 5.
        if self.config.file_delete_delay_ms == 0:
            self.delete_expired_files(due_ms)

    def delete_expired_files(self, now_ms: int) -> int:
        """Unlink the ``.deleted`` files whose delay has passed at ``now_ms``; how many
        segments."""
        due = self.take_expired_files(now_ms)
        for segment in due:
            segment.delete_files()
        return len(due)

    def take_expired_files(self, now_ms: int) -> list[LogSegment]:
        """The ``.deleted`` segments whose delay has passed at ``now_ms``, no longer pending
        here: the caller unlinks them (:meth:`LogSegment.delete_files`), off the log's lock if
        it likes, as Kafka's ``delete-file`` task does. Until it has, a crash leaves ``.deleted``
        files, which the loader's first pass removes."""
        due = [p.segment for p in self._pending_deletes if p.due_ms <= now_ms]
        self._pending_deletes = [p for p in self._pending_deletes if p.due_ms > now_ms]
        return due

    # -- swap ----------------------------------------------------------------------------------
    def swap(
        self,
        new_segments: Sequence[LogSegment],
        old_segments: Sequence[LogSegment],
        *,
        unlink_replaced: bool = False,
    ) -> None:
        """Swap ``new_segments`` in for ``old_segments`` (Kafka ``LocalLog.replaceSegments``).

        The one swap of the code base, run by :meth:`replace_segments` (the cleaner's) and
        :func:`storagecore.bulk_append.bulk_append`. The new segments are complete, flushed and
        named ``*.cleaned``, and they hold only offsets that the old segments held or that
        follow the log end; the callers check that. The protocol, mirrored by the loader's
        first two passes (:mod:`storagecore.loader`):

        1. rename each new segment ``.cleaned`` → ``.swap``, in **descending** base-offset order,
           then fsync the directory. Crash before all are renamed: the loader finds ``.cleaned``
           files, deletes them and every ``.swap`` at or above the lowest one → the old
           segments. Crash after: every new segment is ``.swap`` → the loader completes, deleting
           the segment files in the swapped range.
        2. replace the old segments by the new ones in the segment list (readers, which hold the
           log's lock, see either all old or all new segments).
        3. rename every old segment to ``.deleted``; its files are unlinked after
           ``file.delete.delay.ms`` (with ``unlink_replaced``: at once, for a segment no reader
           can hold, the bulk append's empty one). Crash here: the loader deletes ``.deleted``
           files and completes the ``.swap`` ones.
        4. strip ``.swap`` from the new segments' names, then fsync the directory. Crash here:
           the loader strips the remaining ``.swap`` suffixes.
        5. with ``file.delete.delay.ms`` 0, unlink the old segments' files now.
        """
        new = sorted(new_segments, key=lambda s: s.base_offset)
        # 1. .cleaned -> .swap, highest offset first; then make the renames durable.
        for segment in reversed(new):
            segment.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
        durability.fsync_dir(self.directory)
        # 2. the new segment list.
        old_ids = {id(s) for s in old_segments}
        kept = [s for s in self.segments if id(s) not in old_ids]
        self._set_segments(sorted(kept + new, key=lambda s: s.base_offset))
        # 3. old segments -> .deleted, unlinked later (or now).
        due_ms = self.clock.milliseconds() + self.config.file_delete_delay_ms
        for segment in old_segments:
            segment.change_file_suffixes("", files.DELETED_SUFFIX)
            if unlink_replaced:
                segment.delete_files()
            else:
                self._pending_deletes.append(_PendingDelete(due_ms, segment))
        # 4. strip .swap; the directory fsync makes the final names durable.
        for segment in new:
            segment.change_file_suffixes(files.SWAP_SUFFIX, "")
            if self.file_cache is not None:
                segment.use_file_cache(self.file_cache)
        durability.fsync_dir(self.directory)
        # 5.
        if not unlink_replaced and self.config.file_delete_delay_ms == 0:
            self.delete_expired_files(due_ms)

    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> bool:
        """Swap cleaned segments in for the segments they replace with :meth:`swap`.

        The new segments hold a subset of the records of the old ones, at the same offsets. The
        active segment is never replaced (DESIGN invariant 2). Returns False, changing nothing,
        when some old segment left the log meanwhile.
        """
        new = sorted(new_segments, key=lambda s: s.base_offset)
        present = {id(s) for s in self.segments}
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
        assert self.active_segment not in olds, f"{self.tp}: the active segment is never replaced"
        low = min(s.base_offset for s in olds)
        high = max(s.next_offset() for s in olds)
        for segment in new:
            assert segment.log.path.name.endswith(files.CLEANED_SUFFIX), segment.log.path
            assert low <= segment.base_offset and segment.next_offset() <= high, (
                f"{self.tp}: replacement segment {segment.base_offset} outside [{low}, {high})"
            )
        self.swap(new, olds)
        logger.info(
            "%s: replaced segments %s with %s",
            self.tp,
            [s.base_offset for s in olds],
            [s.base_offset for s in new],
        )
        return True

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self, *, handles_only: bool) -> None:
        """Close every segment (trimming indexes), or with ``handles_only`` only drop the file
        handles (an offline dir, or what a crash leaves behind). Does not flush."""
        self.closed = True
        if self._held_segment is not None:
            self._held_segment.release_held_files()
            self._held_segment = None
        for segment in self.segments:
            if handles_only:
                segment.close_handles()
            else:
                segment.close()
        for pending in self._pending_deletes:
            pending.segment.close_handles()
