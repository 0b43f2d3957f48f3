"""The part of a Log that reads (Kafka's UnifiedLog ``read`` and ``fetchOffsetByTimestamp``): a
base class of :class:`storagecore.log.Log`, apart because it is one concept of that large class,
with the state it reads declared here.

The segment walk and the native read of a fetch range are :class:`storagecore.local_log.
LocalLog`'s and :mod:`storagecore.segment_read`'s. What must not be here: appends, deletions,
producer state.

Thread-safety: ``read`` and ``offset_for_timestamp`` take the log's lock, as the Log's own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from storagecore.config import TopicPartition
from storagecore.errors import OffsetOutOfRangeError, ResourceExhaustedError
from storagecore.index import TimestampOffset
from storagecore.local_log import LocalLog
from storagecore.log_info import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, FetchResult
from storagecore.records.batch import Record, iter_complete_batches
from storagecore.records.layout import NO_TIMESTAMP


class LogReads:
    """Fetches, record iteration and offset lookups of a :class:`storagecore.log.Log`."""

    # The owning Log's state (set by Log.__init__).
    tp: TopicPartition
    _lock: threading.RLock
    _local: LocalLog
    _log_start_offset: int

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
            self._local.check_usable()
            for attempt in (1, 2):
                try:
                    return self._read_locked(
                        start_offset, max_bytes, min_one_message, max_offset, region_min_bytes
                    )
                except OSError as exc:
                    error = self._local.io_failed(f"read from {self.tp}", exc)
                    if attempt == 2 or not isinstance(error, ResourceExhaustedError):
                        raise error from exc
                    # A resource error: the cache shed idle files; a read is tried again.
            raise AssertionError("unreachable")

    def _read_locked(
        self,
        start_offset: int,
        max_bytes: int,
        min_one_message: bool,
        max_offset: int | None,
        region_min_bytes: int | None,
    ) -> FetchResult:
        log_end = self._local.log_end_offset
        if start_offset < self._log_start_offset or start_offset > log_end:
            raise OffsetOutOfRangeError(
                f"{self.tp}: offset {start_offset} is outside [{self._log_start_offset}, {log_end}]"
            )
        upper = log_end if max_offset is None else min(max_offset, log_end)
        data = (
            None
            if start_offset >= upper
            else self._local.read(start_offset, max_bytes, upper, min_one_message, region_min_bytes)
        )
        if data is None:
            return FetchResult(
                b"", start_offset, self._log_start_offset, log_end, log_end, False, start_offset
            )
        next_offset = data.next_offset
        return FetchResult(
            data.records,
            start_offset,
            self._log_start_offset,
            log_end,
            log_end,
            data.first_entry_incomplete,
            start_offset if next_offset < 0 else next_offset,
            data.region,
        )

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
        end = self._local.log_end_offset if end_offset is None else end_offset
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
        with self._lock, self._local.io(f"offset lookup in {self.tp}"):
            if timestamp == EARLIEST_TIMESTAMP:
                return TimestampOffset(NO_TIMESTAMP, self._log_start_offset)
            if timestamp == LATEST_TIMESTAMP:
                return TimestampOffset(NO_TIMESTAMP, self._local.log_end_offset)
            if timestamp == MAX_TIMESTAMP:
                return self._local.find_max_timestamp(self._log_start_offset)
            if timestamp < 0:
                raise ValueError(f"{self.tp}: invalid target timestamp {timestamp}")
            return self._local.find_offset_by_timestamp(timestamp, self._log_start_offset)
