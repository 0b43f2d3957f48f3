"""Decode a file region of record batches into Arrow-layout column buffers, in one call.

The engine's columnar read (DESIGN, "One record engine"): the Spark data source and other bulk
readers hand a whole segment's bytes (or a slice) to :func:`decode_columns` and get back the
buffers of the columns they asked for, without any Python running per record. The buffers are
plain Python buffers in Arrow's layout; the caller wraps them with
``pyarrow.Array.from_buffers`` (zero copy). This package never imports pyarrow.

Two implementations behind one function, chosen once at import (as :mod:`.scan`): the C decoder
of ``storagecore/records/_columns.c`` in the extension ``storagecore.records._native`` when it
is built, else the pure-Python reference :mod:`._columns_py`, which is the specification (same
buffers byte for byte, same problem messages). ``STORAGECORE_NO_EXTENSIONS=1`` forces the
reference; the tests run both and assert which one is loaded.

Choices a caller should know:

* **Validation** is what :meth:`RecordBatch.validate` and :meth:`RecordBatch.records` accept,
  batch by batch, plus int64 overflow of offsets and CreateTime timestamps. The first bad batch
  stops the walk: the result's ``problem`` names its byte position, base offset and what is
  wrong, and the rows are those of the batches before it (:meth:`DecodedColumns.check` raises
  :class:`CorruptRecordError` instead). A torn tail (a batch running past ``end``) ends the walk
  without a problem, as Kafka's FileLogInputStream; ``position`` says where.
* **Control batches** (transaction markers) are skipped by default, as Spark's Kafka source
  never shows them; ``include_control=True`` decodes them as rows. Skipped control batches are
  still validated (size, magic, CRC, counts, codec).
* **Offset range**: with ``min_offset`` / ``max_offset`` only records with an offset in
  ``[min_offset, max_offset)`` become rows; batches entirely outside the range are skipped
  after their framing is read, without a CRC check or decompression.
* **Batch table**: beside the columns, every walked batch gets an entry in
  ``batch_buffers`` (position, header fields, and which rows came from it), so that a reader
  can, say, drop the rows of aborted transactions by producer id without another walk.
* **Output size**: ``max_rows`` bounds the rows of one call at a batch boundary, so that a
  reader gets its Arrow batches from the decoder at their final size (buffers of a few MB that
  the allocator reuses, instead of a whole file region's worth faulted in and freed per call).
* **Compressed batches** are decompressed once per batch through :mod:`.codecs` (the only
  crossing into Python, once per compressed batch), bounded by ``max_output_bytes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from storagecore.errors import CorruptRecordError
from storagecore.native import load_extension
from storagecore.records import _columns_py, layout
from storagecore.records.codecs import DEFAULT_MAX_OUTPUT_BYTES, Compression, decompress
from storagecore.records.columns_types import (
    BATCH_COLUMNS,
    COLUMN_NAMES,
    Buffer,
    DecodedColumns,
    Decompress,
)

_Decode = Callable[
    [
        bytes | bytearray | memoryview,
        int,
        int,
        Sequence[str],
        int | None,
        int | None,
        bool,
        int,
        Decompress,
        int,
    ],
    _columns_py.RawColumns,
]

_MAGIC_OFFSET: Final = layout.MAGIC_OFFSET
_CURRENT_MAGIC: Final = layout.CURRENT_MAGIC

_NATIVE = load_extension("storagecore.records._native")
if _NATIVE is None:
    _decode: _Decode = _columns_py.decode_columns
else:
    from storagecore.records import _native  # typed by _native.pyi

    _decode = _native.decode_columns
#: "c" or "python": which implementation this process uses (tests assert it).
IMPLEMENTATION: Final[str] = "python" if _NATIVE is None else "c"


def _decompress(codec_id: int, data: bytes, max_output_bytes: int) -> bytes | str:
    """The codecs of :mod:`.codecs`, with a corrupt payload as a message for the decoder."""
    try:
        return decompress(Compression.from_id(codec_id), data, max_output_bytes)
    except CorruptRecordError as exc:
        return str(exc)


def decode_columns(
    region: bytes | bytearray | memoryview,
    position: int = 0,
    end: int | None = None,
    columns: Iterable[str] = COLUMN_NAMES,
    *,
    min_offset: int | None = None,
    max_offset: int | None = None,
    include_control: bool = False,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    max_rows: int = 0,
) -> DecodedColumns:
    """The requested ``columns`` of the batches in ``region[position:end]`` (``end``: the
    region's end when None). See the module docstring and :class:`DecodedColumns`.
    ``max_rows`` (0: no limit) ends the walk before a batch that would take the rows past it,
    once a row is decoded (a first batch holding more is decoded whole); ``position`` is
    then that batch's, where the next call starts. Legacy v0/v1 entries never end a call
    early (a reader slices what it gets)."""
    names = tuple(sorted(_columns_py.wanted_columns(columns), key=COLUMN_NAMES.index))
    if end is None:
        end = memoryview(region).nbytes
    args = (region, position, end, names, min_offset, max_offset, include_control)
    raw = _decode(*args, max_output_bytes, _decompress, max_rows)
    problem_at = raw[2]
    if (
        raw[3] is not None
        and _decode is not _columns_py.decode_columns
        and memoryview(region).nbytes > problem_at + _MAGIC_OFFSET
        and region[problem_at + _MAGIC_OFFSET] < _CURRENT_MAGIC
    ):
        # The C decoder takes magic 2 only; a region holding v0/v1 entries (old data, read
        # rarely) is decoded whole by the reference, which reads them.
        raw = _columns_py.decode_columns(*args, max_output_bytes, _decompress, max_rows)
    return DecodedColumns(*raw)


__all__ = [
    "BATCH_COLUMNS",
    "COLUMN_NAMES",
    "IMPLEMENTATION",
    "Buffer",
    "DecodedColumns",
    "decode_columns",
]
