"""Types of the C extension storagecore.records._native (_native.c, _columns.c).

Every function and constant the module defines; tests/unit/storagecore/records/test_columns.py
checks that this list and the built module's agree.
"""

from collections.abc import Sequence
from typing import Any

from typing_extensions import Buffer

from storagecore.records.columns_types import Decompress

# The layout constants of _layout.h (checked against layout.py by test_native_layout.py).
MAX_VARINT_BYTES: int
MAX_VARLONG_BYTES: int
LOG_OVERHEAD: int
RECORD_BATCH_OVERHEAD: int
BASE_OFFSET_OFFSET: int
LENGTH_OFFSET: int
PARTITION_LEADER_EPOCH_OFFSET: int
MAGIC_OFFSET: int
CRC_OFFSET: int
ATTRIBUTES_OFFSET: int
LAST_OFFSET_DELTA_OFFSET: int
BASE_TIMESTAMP_OFFSET: int
MAX_TIMESTAMP_OFFSET: int
PRODUCER_ID_OFFSET: int
PRODUCER_EPOCH_OFFSET: int
BASE_SEQUENCE_OFFSET: int
RECORDS_COUNT_OFFSET: int
CURRENT_MAGIC: int
# legacy.py's constants as _legacy.c has them (test_legacy_native.py compares).
LEGACY_HEADER_BYTES: int
LEGACY_OVERHEAD_V0: int
LEGACY_OVERHEAD_V1: int
COMPRESSION_CODEC_MASK: int
TIMESTAMP_TYPE_MASK: int
TRANSACTIONAL_FLAG_MASK: int
CONTROL_FLAG_MASK: int
DELETE_HORIZON_FLAG_MASK: int
MIN_DECLARED_BATCH_LENGTH: int
# The index entry sizes the native append writes (storagecore/index/).
OFFSET_INDEX_ENTRY_BYTES: int
TIME_INDEX_ENTRY_BYTES: int

def crc32c(data: bytes | bytearray | memoryview, /) -> int:
    """CRC-32C (Castagnoli) as an unsigned 32-bit int."""

def scan_records(
    payload: bytes | bytearray | memoryview, count: int, base_timestamp: int, /
) -> tuple[str | None, int, int, int, bool]:
    """(problem, max_timestamp, min_timestamp, null_key_count, offsets_sequential)"""

def validate_uncompressed(
    out: bytearray,
    next_offset: int,
    now_ms: int,
    client: bool,
    replication: bool,
    compact: bool,
    max_message_bytes: int,
    leader_epoch: int,
    before_max_ms: int,
    after_max_ms: int,
    /,
) -> tuple[int, int, int, int, int, int] | None:
    """(first_offset, last_offset, max_timestamp, offset_of_max_timestamp, record_count,
    batch_count), or None: use the Python path."""

def append_to_segment(
    settings: tuple[int, int, bool, int, int, int, bool],
    segment: object,
    fd: int,
    data: bytes | bytearray | memoryview,
    now_ms: int,
    client: bool,
    replication: bool,
    leader_epoch: int,
    /,
) -> tuple[Any, ...] | None:
    """The active ``segment``'s append (storagecore.native_append): (first_offset, last_offset,
    max_timestamp, offset_of_max_timestamp, record_count, bytes_written) when written at the end
    of ``fd`` with its index entries and the segment's bookkeeping; ValidatedRecords' fields
    (the rewritten bytes first) when valid but left to the general path (a producer id, a roll,
    an index entry not reserved), and a ninth field, True when only the producer ids kept it
    back; None: use the Python path, nothing written."""

def append_active(log: Any, data: Buffer, /) -> Any:
    """Log.append's common case: the LogAppendInfo, or None (nothing was done): see
    _log_append.c."""

def append_active_setup(
    native_append_module: Any, log_append_info: type, system_clock: type, /
) -> None:
    """What append_active needs of the layers above, given once: see _log_append.c."""

def write_to_segment(
    settings: tuple[int, int, bool, int, int, int, bool],
    segment: object,
    fd: int,
    buffer: bytes | bytearray | memoryview,
    first_offset: int,
    last_offset: int,
    max_timestamp: int,
    offset_of_max_timestamp: int,
    now_ms: int,
    /,
) -> int | None:
    """The write of a request ``append_to_segment`` handed back for its producer ids (the
    rewritten ``buffer`` and its fields), once the producer state accepted it: the bytes
    written, with the index entries and the segment's bookkeeping; None: it no longer fits
    without a roll, nothing written."""

def decode_columns(
    region: bytes | bytearray | memoryview,
    position: int,
    end: int,
    columns: Sequence[str],
    min_offset: int | None,
    max_offset: int | None,
    include_control: bool,
    max_output_bytes: int,
    decompress: Decompress,
    max_rows: int = 0,
    /,
) -> tuple[
    int,
    int,
    int,
    str | None,
    dict[str, tuple[bytes | bytearray, ...]],
    dict[str, int],
    dict[str, bytes | bytearray],
]:
    """(rows, batches, position, problem, buffers, null_counts, batch_buffers): see
    columns_types.py."""

def producer_batches(region: bytes | bytearray | memoryview, /) -> tuple[int, int, bytes, int, int]:
    """(consumed, next_offset, positions, problem, problem_value): see _headers.c."""

def decode_legacy_set(
    data: bytes | bytearray | memoryview,
    wrapper_magic: int,
    wrapper_offset: int,
    log_append: bool,
    log_append_time: int,
    /,
) -> list[tuple[int, int, bytes | None, bytes | None]] | str:
    """The records of a legacy message set, or the problem: see _legacy.c."""

def check_legacy_entry(entry: bytes | bytearray | memoryview, /) -> str | None:
    """What is wrong with one legacy entry, or None: see _legacy.c."""

def producer_batches_file(
    fd: int, start: int, end: int, /
) -> tuple[int, int, bytes, bytes, int, int]:
    """(consumed, next_offset, positions, headers, problem, problem_value): producer_batches
    over the file's bytes [start, end), read with pread; consumed and the positions are file
    positions, headers the 61-byte headers of those batches: see _headers.c."""

def read_by_offset(
    fd: int,
    offsets: Buffer,
    positions: Buffer,
    base_offset: int,
    fetch_offset: int,
    max_size: int,
    max_position: int,
    size_bytes: int,
    min_one_message: bool,
    /,
) -> tuple[int, bytes, bool, int] | None:
    """(position, records, incomplete, next_offset) of LogSegment.read's bytes path, or None:
    use the Python path; see _fetch.c."""

def lz4_frame_decompress(data: Buffer, max_output_bytes: int, /) -> bytes | None:
    """The first LZ4 frame's content, or None for a frame to leave to lz4.frame (linked blocks,
    checksums, a dictionary, anything invalid, more than max_output_bytes): see _lz4_frame.c."""

def lz4_matches_package(flag: bool, /) -> None:
    """Whether the liblz4 loaded is the lz4 package's (codecs.py says, on its first lz4 batch);
    only then does the native append decode lz4 batches: see _lz4_frame.c."""

def lz4_version() -> int:
    """LZ4_versionNumber() of the liblz4 the module loaded, 0 when it could load none."""

APPEND_SLOTS: tuple[str, ...]
"""The attributes append_to_segment reads and writes at their __slots__ offsets (_slots.h)."""
LOG_APPEND_SLOTS: tuple[str, ...]
"""The attributes append_active reads and writes at their __slots__ offsets (_slots.h)."""
