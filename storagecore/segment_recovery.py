"""Checking and rebuilding one segment's indexes from its ``.log`` (Kafka's
``LogSegment.recover`` and ``LogSegment.sanityCheck``), for the loader.

:func:`sanity_check_segment` is the cheap check of a segment written before a clean shutdown;
:func:`recover_segment` walks every batch, cuts the file at the first invalid one and rebuilds
both indexes. Called by :mod:`storagecore.loader` only (and tests); the segment is not yet
shared with readers.

What must not be here: deciding which segments to check or recover, or what follows a torn
segment (the loader's passes), and anything about producer state.
"""

from __future__ import annotations

import logging

from storagecore.errors import CorruptRecordError
from storagecore.records import legacy
from storagecore.records.file_records import BatchHeader
from storagecore.records.layout import NO_TIMESTAMP
from storagecore.segment import LogSegment

logger = logging.getLogger(__name__)


def recover_segment(segment: LogSegment, max_index_size_bytes: int) -> int:
    """Rebuild the indexes of ``segment`` from its log and cut it at the first invalid batch.

    Returns the number of bytes truncated. A batch is valid when its size, magic and CRC
    check out, its offsets lie in this segment and follow the previous batch.
    """
    offset_index, time_index = segment.offset_index, segment.time_index
    offset_index.reset()
    time_index.reset()
    offset_index.resize(max_index_size_bytes)
    time_index.resize(max_index_size_bytes)
    segment.max_timestamp_so_far = NO_TIMESTAMP
    segment.offset_of_max_timestamp_so_far = segment.base_offset
    segment.rolling_based_timestamp = None
    valid_bytes = 0
    last_index_entry = 0
    expected_min_offset = segment.base_offset
    problem = "incomplete batch at the end of the file (torn write)"
    try:
        for position, batch in segment.log.batches(0):
            batch.validate()
            if batch.base_offset < expected_min_offset:
                raise CorruptRecordError(
                    f"batch at position {position} has base offset {batch.base_offset}, "
                    f"expected at least {expected_min_offset}"
                )
            if not segment.can_convert_to_relative_offset(batch.last_offset):
                raise CorruptRecordError(
                    f"batch at position {position} has last offset {batch.last_offset}, "
                    f"not addressable from base offset {segment.base_offset}"
                )
            if batch.max_timestamp > segment.max_timestamp_so_far:
                segment.max_timestamp_so_far = batch.max_timestamp
                segment.offset_of_max_timestamp_so_far = batch.last_offset
            # A full index (segment.index.bytes lowered since the segment was written)
            # just stays sparser: lookups remain correct, only slower.
            if (
                valid_bytes - last_index_entry > segment.index_interval_bytes
                and not offset_index.is_full()
                and not time_index.is_full()
            ):
                offset_index.append(batch.last_offset, valid_bytes)
                time_index.maybe_append(
                    segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far
                )
                last_index_entry = valid_bytes
            valid_bytes += batch.size_bytes
            expected_min_offset = batch.next_offset
    except CorruptRecordError as exc:
        problem = str(exc)
    truncated = segment.log.size_bytes - valid_bytes
    if truncated > 0:
        logger.warning(
            "Truncating %s to %d bytes, removing %d bytes at position %d: %s",
            segment.log.path,
            valid_bytes,
            truncated,
            valid_bytes,
            problem,
        )
        segment.log.truncate_to(valid_bytes)
    offset_index.trim_to_valid_size()
    segment.append_final_time_entry()
    time_index.trim_to_valid_size()
    segment.bytes_since_last_index_entry = valid_bytes - last_index_entry
    segment.set_next_offset(expected_min_offset)
    # Entries whose marker was cut off go with it (the loader rebuilds a recovered segment's
    # transaction index from the producer state: storagecore.aborted_transactions).
    segment.txn_index.truncate_to(expected_min_offset)
    return truncated


def sanity_check_segment(segment: LogSegment) -> None:
    """Indexes consistent with the log and a clean tail, checked cheaply: index bounds and
    order, then a header walk from the last index entry to the end of the file and the CRC
    of the last batch. Raises CorruptIndexError or CorruptRecordError."""
    log = segment.log
    segment.offset_index.sanity_check(log.size_bytes)
    start = segment.offset_index.lookup(segment.offset_index.last_offset).position
    end = start
    last: BatchHeader | None = None
    for header in log.batch_headers(start):
        end = header.position + header.size_bytes
        last = header
    if end != log.size_bytes:
        raise CorruptRecordError(
            f"{log.path}: {log.size_bytes - end} bytes after the last complete "
            f"batch at position {end}"
        )
    if last is not None:
        data = log.read(last.position, last.size_bytes)
        legacy.batch_view(data).validate()  # a v2 batch or a v0/v1 message
        if last.base_offset < segment.base_offset:
            raise CorruptRecordError(
                f"{log.path}: last batch offset {last.base_offset} is below the base"
            )
    segment.set_next_offset(last.next_offset if last is not None else segment.base_offset)
    segment.time_index.sanity_check(segment.next_offset())
