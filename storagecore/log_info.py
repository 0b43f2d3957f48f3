"""What a Log's append and read return (Kafka's LogAppendInfo and FetchDataInfo, and FetchData,
a segment's read), and the special timestamps of ListOffsets. Plain values: no I/O, no locks;
:mod:`storagecore.log` re-exports them.
"""

from __future__ import annotations

from typing import NamedTuple

from storagecore.records.file_records import FileRegion

#: ListOffsets targets that are not timestamps (Kafka's ``ListOffsetsRequest`` constants).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


class FetchData(NamedTuple):
    """A raw byte range of a ``.log``: whole batches from ``position``, the last possibly cut.
    (A NamedTuple, not a frozen dataclass: one is built per read, and a tuple builds in a
    fraction of the time.)"""

    fetch_offset: int
    segment_base_offset: int
    position: int
    records: bytes
    first_entry_incomplete: bool = False
    #: Offset after the last complete batch in ``records`` (where the next fetch starts).
    next_offset: int = -1
    #: The same bytes as a zero-copy region instead (``records`` is then empty).
    region: FileRegion | None = None


class LogAppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    valid_bytes: int
    duplicate: bool = False
    """The append repeated one of its producer's last five batches: nothing was written and
    the offsets are the original batch's."""


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
