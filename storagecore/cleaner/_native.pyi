"""Types of the cleaner's C engine (storagecore/cleaner/_native.c, which documents each call).

Checked against the built module by tests/unit/storagecore/test_native_stubs.py (mypy's
stubtest).
"""

from collections.abc import Callable

from typing_extensions import Buffer

# The v2 batch layout (storagecore/records/_layout.h; test_native_layout.py checks each).
ATTRIBUTES_OFFSET: int
BASE_OFFSET_OFFSET: int
BASE_SEQUENCE_OFFSET: int
BASE_TIMESTAMP_OFFSET: int
COMPRESSION_CODEC_MASK: int
CONTROL_FLAG_MASK: int
CRC_OFFSET: int
CURRENT_MAGIC: int
DELETE_HORIZON_FLAG_MASK: int
LAST_OFFSET_DELTA_OFFSET: int
LENGTH_OFFSET: int
LOG_OVERHEAD: int
MAGIC_OFFSET: int
MAX_TIMESTAMP_OFFSET: int
MAX_VARINT_BYTES: int
MAX_VARLONG_BYTES: int
MIN_DECLARED_BATCH_LENGTH: int
PARTITION_LEADER_EPOCH_OFFSET: int
PRODUCER_EPOCH_OFFSET: int
PRODUCER_ID_OFFSET: int
RECORDS_COUNT_OFFSET: int
RECORD_BATCH_OVERHEAD: int
TIMESTAMP_TYPE_MASK: int
TRANSACTIONAL_FLAG_MASK: int

# The engine's own.
HASH_BYTES: int
ENTRY_BYTES: int
SECRET_BYTES: int
SIP_C_ROUNDS: int
SIP_D_ROUNDS: int
STOP_END: int
STOP_BATCH: int
STOP_FULL: int

def siphash(data: Buffer, secret: Buffer, c_rounds: int, d_rounds: int, /) -> bytes: ...
def crc32c(data: Buffer, /) -> int: ...
def digest_keys(offsets: Buffer, data: Buffer, rows: int, secret: Buffer, /) -> bytes: ...
def put_digests(
    table: Buffer, slots: int, size: int, digests: Buffer, offsets: Buffer, /
) -> tuple[int, int, int]: ...
def map_region(
    table: Buffer,
    slots: int,
    size: int,
    capacity: int,
    secret: Buffer,
    region: Buffer,
    start: int,
    latest_offset: int,
    decompressors: tuple[Callable[[memoryview], bytes] | None, ...] | None,
    positions: Buffer,
    positions_start: int,
    /,
) -> tuple[int, int, int, int, int, int, int, int, int]: ...
def filter_region(
    table: Buffer,
    slots: int,
    latest_offset: int,
    secret: Buffer,
    region: Buffer,
    now_ms: int,
    new_horizon_ms: int,
    upper_bound: int,
    producers: Buffer,
    decompressors: tuple[Callable[[memoryview], bytes] | None, ...] | None,
    compressors: tuple[Callable[[memoryview], bytes] | None, ...] | None,
    chunk: tuple[int, int, int, int, int],
    positions: Buffer,
    positions_start: int,
    checked: int,
    /,
) -> tuple[
    bytes,
    bytes,
    tuple[int, int, int, int, int],
    int,
    int,
    int,
    int,
    int,
    int,
    int,
    int | None,
    int,
    int,
    int,
    int,
    int,
]: ...
def put_keys(
    table: Buffer,
    slots: int,
    size: int,
    capacity: int,
    secret: Buffer,
    batch: Buffer,
    payload: Buffer | None,
    start: int,
    /,
) -> tuple[int, int, int, int, bool, int, int] | None: ...
def filter_records(
    table: Buffer,
    slots: int,
    secret: Buffer,
    latest_offset: int,
    batch: Buffer,
    payload: Buffer | None,
    now_ms: int,
    new_horizon_ms: int,
    /,
) -> tuple[int, int, bool, bytes | None, int, int, int, int] | None: ...
def put_legacy_keys(
    table: Buffer,
    slots: int,
    size: int,
    capacity: int,
    secret: Buffer,
    data: Buffer,
    wrapper_magic: int,
    wrapper_offset: int,
    start: int,
    /,
) -> tuple[int, int, int, int, bool, int, int] | None: ...
def filter_legacy_records(
    table: Buffer,
    slots: int,
    secret: Buffer,
    latest_offset: int,
    data: Buffer,
    wrapper_magic: int,
    wrapper_offset: int,
    retain_deletes: bool,
    /,
) -> tuple[bytes, int, int, int] | None: ...
