"""The all-or-nothing bulk append of a partition (offline loads, the pipeline's writes).

:func:`bulk_append` writes whole batches into new ``.cleaned`` segments after the log end and
swaps them in with the one swap of the code base (:meth:`storagecore.local_log.LocalLog.swap`),
so a crash leaves the log either as it was or with every batch. Called by
:meth:`storagecore.log.Log.bulk_append`, which holds the log's lock.

What must not be here: a swap protocol of its own, or the segment list's bookkeeping (both are
:class:`~storagecore.local_log.LocalLog`'s).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable
from typing import NamedTuple

from storagecore import files
from storagecore.errors import RecordTooLargeError
from storagecore.local_log import LocalLog
from storagecore.log_info import LogAppendInfo
from storagecore.records import layout
from storagecore.records.batch import RecordBatch
from storagecore.segment import LogSegment

logger = logging.getLogger(__name__)

_BASE_OFFSET = struct.Struct(">q")  # the first field of a batch, outside its CRC


class BulkWrite(NamedTuple):
    """What :func:`bulk_append` appended."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    record_count: int
    size_bytes: int
    segment_count: int

    def append_info(self, log_start_offset: int) -> LogAppendInfo:
        """What :meth:`storagecore.log.Log.bulk_append` returns for this write."""
        return LogAppendInfo(
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            max_timestamp=self.max_timestamp,
            shallow_offset_of_max_timestamp=self.offset_of_max_timestamp,
            log_append_time=layout.NO_TIMESTAMP,
            log_start_offset=log_start_offset,
            record_count=self.record_count,
            valid_bytes=self.size_bytes,
        )


def bulk_append(local: LocalLog, batches: Iterable[bytes | bytearray | memoryview]) -> BulkWrite:
    """Append ``batches`` (at least one) to ``local`` all or nothing, even across a crash.

    The batches' offsets are reassigned from the log end offset (the base-offset field lies
    outside the CRC). They are written into new segments named ``*.cleaned`` after the log
    end, and swapped in with :meth:`LocalLog.swap`, the empty active segment being the one
    replaced:

    1. roll, so the active segment is empty at the log end offset ``L``;
    2. write ``L.log.cleaned`` (and more segments when ``segment.bytes`` is reached), flush.
       Crash or failure here: the ``.cleaned`` files are deleted (by the loader after a
       crash) → the log as it was;
    3. the swap's step 1, ``.cleaned`` → ``.swap`` highest first and a directory fsync, is
       the commit point: from here the loader completes the swap (it deletes the segments
       in the swapped range, here only the empty one at ``L``);
    4. the swap's steps 2-4: the new segments take the empty segment's place in the list,
       it is renamed ``.deleted`` and unlinked at once, ``.swap`` is stripped, the directory
       fsynced;
    5. roll a new active segment at the new log end; everything is flushed up to it.

    Raises :class:`RecordTooLargeError` naming the partition for a batch above
    ``max.message.bytes``; nothing is appended then.
    """
    # 1.
    local.roll(None)
    active = local.active_segment
    assert active.size_bytes == 0 and active.base_offset == local.log_end_offset
    # 2.
    new, written = _write_cleaned_segments(local, local.log_end_offset, batches)
    # 3.-4.
    local.swap(new, [active], unlink_replaced=True)
    # 5.
    local.roll(None)
    local.recovery_point = local.log_end_offset
    logger.info(
        "%s: bulk-appended offsets [%d, %d) in %d segment(s)",
        local.tp,
        written.first_offset,
        written.last_offset + 1,
        len(new),
    )
    return written


def _write_cleaned_segments(
    local: LocalLog, first_offset: int, batches: Iterable[bytes | bytearray | memoryview]
) -> tuple[list[LogSegment], BulkWrite]:
    """Step 2 of :func:`bulk_append`. Any failure deletes what was written and re-raises."""
    config = local.config
    now_ms = local.clock.milliseconds()
    new: list[LogSegment] = []
    next_offset = first_offset
    max_timestamp = layout.NO_TIMESTAMP
    offset_of_max = -1
    count = 0
    size_total = 0
    try:
        for data in batches:
            batch = RecordBatch(bytes(data))
            batch.validate()
            size = batch.size_bytes
            if size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"{local.tp}: batch of {size} bytes exceeds max.message.bytes="
                    f"{config.max_message_bytes}"
                )
            delta = batch.last_offset_delta
            if not new or new[-1].size_bytes + size > config.segment_bytes:
                if new:
                    new[-1].on_become_inactive_segment()
                new.append(
                    LogSegment.open(
                        local.directory,
                        next_offset,
                        index_interval_bytes=config.index_interval_bytes,
                        max_index_size_bytes=config.segment_index_bytes,
                        now_ms=now_ms,
                        suffix=files.CLEANED_SUFFIX,
                        file_cache=local.file_cache,
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
        assert new, f"{local.tp}: bulk append of no batches"
        new[-1].on_become_inactive_segment()
        for segment in new:
            segment.flush()
    except BaseException:
        for segment in new:
            segment.delete_files()  # still .cleaned: nothing refers to them
        raise
    written = BulkWrite(
        first_offset, next_offset - 1, max_timestamp, offset_of_max, count, size_total, len(new)
    )
    return new, written
