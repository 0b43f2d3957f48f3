"""Types shared by the two implementations of the columnar decoder (:mod:`.columns`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NamedTuple

from storagecore.errors import CorruptRecordError

#: Every column the decoder can build, in the order of Spark's Kafka source schema.
COLUMN_NAMES: Final = ("key", "value", "offset", "timestamp", "timestamp_type", "headers")

#: The per-batch table (one entry per batch walked), name and struct type code of each column.
#: Header fields as stored, plus where the batch's rows are: rows first_row .. first_row + rows
#: of the columns came from it (rows 0: skipped, or no record in the offset range). With the
#: producer fields a reader can drop the rows of aborted transactions (read_committed).
BATCH_COLUMNS: Final = (
    ("position", "q"),
    ("base_offset", "q"),
    ("last_offset_delta", "i"),
    ("partition_leader_epoch", "i"),
    ("attributes", "h"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("first_row", "q"),
    ("rows", "i"),
)

#: A buffer of a decoded column: the C decoder returns bytearrays, the reference bytes.
Buffer = bytes | bytearray

#: (codec id, compressed payload, max_output_bytes) -> the uncompressed payload, or a str
#: saying why it cannot be decompressed. The one crossing into Python per compressed batch.
Decompress = Callable[[int, bytes, int], bytes | str]


class DecodedColumns(NamedTuple):
    """What :func:`storagecore.records.columns.decode_columns` returns.

    ``buffers`` holds the requested columns only, each as the buffers that
    ``pyarrow.Array.from_buffers`` takes (little-endian, Arrow layout), validity bitmaps with
    bit set = not null, least significant bit first:

    * ``offset``, ``timestamp``: ``(int64 values,)``; timestamps in ms, a LogAppendTime
      batch's records all carry its max timestamp (as Kafka's readers see them);
    * ``timestamp_type``: ``(int32 values,)``, 0 CreateTime, 1 LogAppendTime (Spark's type);
    * ``key``, ``value``: ``(validity, int32 offsets [rows + 1], data)``: Arrow binary;
    * ``headers``: ``(list offsets [rows + 1], key offsets, key data, value validity,
      value offsets, value data)``: Arrow ``list<struct<key: string, value: binary>>``, list
      and struct without validity (never null), header keys never null.

    ``null_counts`` has ``key``, ``value`` and ``headers.value`` for the columns requested.
    ``batch_buffers`` is the per-batch table, always built (it costs a few bytes per batch):
    one little-endian buffer per :data:`BATCH_COLUMNS` entry, ``batches`` items each.
    """

    #: Records decoded (rows of every column).
    rows: int
    #: Batches walked: decoded, or skipped (control batches, batches outside the offset range).
    batches: int
    #: Byte position where the walk stopped: ``end``, the start of a torn tail (a batch whose
    #: declared size runs past ``end``, or fewer bytes than a header's first 17), or the bad
    #: batch named in ``problem``.
    position: int
    #: What is wrong with the batch at ``position``, or None. Rows come from the batches before.
    problem: str | None
    buffers: dict[str, tuple[Buffer, ...]]
    null_counts: dict[str, int]
    batch_buffers: dict[str, Buffer]

    def check(self) -> DecodedColumns:
        """Self, or :class:`CorruptRecordError` with the problem."""
        if self.problem is not None:
            raise CorruptRecordError(self.problem)
        return self
