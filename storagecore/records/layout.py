"""Byte layout of a Kafka record batch, magic v2, written once.

Every position used by the reader, the writer, the recovery scan and the tools is derived from the
``struct.Struct`` below; nothing else in the project spells a header offset as a number. Schema
(all integers big-endian, Kafka ``DefaultRecordBatch``)::

    baseOffset: int64
    batchLength: int32          bytes after this field
    partitionLeaderEpoch: int32 not covered by the CRC
    magic: int8                 2
    crc: uint32                 CRC-32C from attributes to the end of the batch
    attributes: int16
    lastOffsetDelta: int32
    baseTimestamp: int64
    maxTimestamp: int64
    producerId: int64
    producerEpoch: int16
    baseSequence: int32
    recordsCount: int32
    records: [Record]
"""

from __future__ import annotations

import struct
from typing import Final

BATCH_HEADER: Final = struct.Struct(
    ">"
    "q"  # base_offset
    "i"  # batch_length: bytes after this field
    "i"  # partition_leader_epoch
    "b"  # magic
    "I"  # crc (CRC-32C of attributes .. end)
    "h"  # attributes
    "i"  # last_offset_delta
    "q"  # base_timestamp
    "q"  # max_timestamp
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # base_sequence
    "i"  # records_count
)
#: The first two fields (base offset, batch length): all a walk over batches needs to step.
LOG_HEADER_PREFIX: Final = struct.Struct(BATCH_HEADER.format[:3])

# Positions, each derived from the one before it.
BASE_OFFSET_OFFSET: Final = 0
LENGTH_OFFSET: Final = BASE_OFFSET_OFFSET + struct.calcsize(">q")
PARTITION_LEADER_EPOCH_OFFSET: Final = LENGTH_OFFSET + struct.calcsize(">i")
MAGIC_OFFSET: Final = PARTITION_LEADER_EPOCH_OFFSET + struct.calcsize(">i")
CRC_OFFSET: Final = MAGIC_OFFSET + struct.calcsize(">b")
ATTRIBUTES_OFFSET: Final = CRC_OFFSET + struct.calcsize(">I")
LAST_OFFSET_DELTA_OFFSET: Final = ATTRIBUTES_OFFSET + struct.calcsize(">h")
BASE_TIMESTAMP_OFFSET: Final = LAST_OFFSET_DELTA_OFFSET + struct.calcsize(">i")
MAX_TIMESTAMP_OFFSET: Final = BASE_TIMESTAMP_OFFSET + struct.calcsize(">q")
PRODUCER_ID_OFFSET: Final = MAX_TIMESTAMP_OFFSET + struct.calcsize(">q")
PRODUCER_EPOCH_OFFSET: Final = PRODUCER_ID_OFFSET + struct.calcsize(">q")
BASE_SEQUENCE_OFFSET: Final = PRODUCER_EPOCH_OFFSET + struct.calcsize(">h")
RECORDS_COUNT_OFFSET: Final = BASE_SEQUENCE_OFFSET + struct.calcsize(">i")
RECORDS_OFFSET: Final = RECORDS_COUNT_OFFSET + struct.calcsize(">i")

#: baseOffset + batchLength: the bytes of a batch not counted in batchLength.
LOG_OVERHEAD: Final = LENGTH_OFFSET + struct.calcsize(">i")
#: What a reader must see before it can dispatch on the magic byte.
HEADER_SIZE_UP_TO_MAGIC: Final = MAGIC_OFFSET + struct.calcsize(">b")
RECORD_BATCH_OVERHEAD: Final = BATCH_HEADER.size
#: Kafka's FileLogInputStream treats a declared size below the legacy v0 overhead as corruption.
MIN_DECLARED_BATCH_LENGTH: Final = 14

CURRENT_MAGIC: Final = 2

# Attribute bits (low byte of the int16).
COMPRESSION_CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG_MASK: Final = 0x10
CONTROL_FLAG_MASK: Final = 0x20
DELETE_HORIZON_FLAG_MASK: Final = 0x40

NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1

# Control records (transaction markers): key = version int16 + type int16,
# end-transaction value = version int16 + coordinator epoch int32.
CONTROL_RECORD_KEY: Final = struct.Struct(">hh")
END_TXN_MARKER_VALUE: Final = struct.Struct(">hi")
CONTROL_TYPE_ABORT: Final = 0
CONTROL_TYPE_COMMIT: Final = 1

#: Varint / varlong widths (zigzag, base-128 groups).
MAX_VARINT_BYTES: Final = 5
MAX_VARLONG_BYTES: Final = 10

# Relations between the constants (the layout is wrong if any of these fails).
assert RECORD_BATCH_OVERHEAD == 61, "must match Kafka's DefaultRecordBatch.RECORD_BATCH_OVERHEAD"
assert RECORDS_OFFSET == RECORD_BATCH_OVERHEAD
assert LOG_OVERHEAD == 12 == LOG_HEADER_PREFIX.size
assert HEADER_SIZE_UP_TO_MAGIC == 17
assert CRC_OFFSET == 17 and ATTRIBUTES_OFFSET == CRC_OFFSET + 4 == 21
assert (LAST_OFFSET_DELTA_OFFSET, BASE_TIMESTAMP_OFFSET, MAX_TIMESTAMP_OFFSET) == (23, 27, 35)
assert (PRODUCER_ID_OFFSET, PRODUCER_EPOCH_OFFSET, BASE_SEQUENCE_OFFSET) == (43, 51, 53)
assert RECORDS_COUNT_OFFSET == 57
assert MIN_DECLARED_BATCH_LENGTH <= RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
assert CONTROL_RECORD_KEY.size == 4 and END_TXN_MARKER_VALUE.size == 6
