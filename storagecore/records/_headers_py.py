"""Pure-Python reference of the producer walk (storagecore/records/_headers.c, whose comment
is the contract): the batches of a region that carry a producer id, and where the walk ended.

Same answer as the C function on every input (tests/unit/storagecore/records/test_headers.py).
"""

from __future__ import annotations

import struct
from typing import Final

from storagecore.records import layout

PROBLEM_NONE: Final = 0
PROBLEM_SHORT_LENGTH: Final = 1
PROBLEM_SHORT_V2: Final = 2

_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_POSITION: Final = struct.Struct("=q")


def producer_batches(region: bytes | bytearray | memoryview) -> tuple[int, int, bytes, int, int]:
    """(consumed, next_offset, positions, problem, problem_value) of ``region``."""
    end = len(region)
    position = 0
    next_offset = -1
    positions = bytearray()
    while end - position >= layout.HEADER_SIZE_UP_TO_MAGIC:
        base_offset, length = layout.LOG_HEADER_PREFIX.unpack_from(region, position)
        if length < layout.MIN_DECLARED_BATCH_LENGTH:
            return position, next_offset, bytes(positions), PROBLEM_SHORT_LENGTH, length
        size = length + layout.LOG_OVERHEAD
        if size > end - position:
            break
        if region[position + layout.MAGIC_OFFSET] == layout.CURRENT_MAGIC:
            if size < layout.RECORD_BATCH_OVERHEAD:
                return position, next_offset, bytes(positions), PROBLEM_SHORT_V2, size
            (last_delta,) = _INT32.unpack_from(region, position + layout.LAST_OFFSET_DELTA_OFFSET)
            next_offset = base_offset + last_delta + 1
            (producer_id,) = _INT64.unpack_from(region, position + layout.PRODUCER_ID_OFFSET)
            if producer_id != layout.NO_PRODUCER_ID:
                positions += _POSITION.pack(position)
        else:
            next_offset = base_offset + 1  # a legacy entry's offset is its last
        position += size
    return position, next_offset, bytes(positions), PROBLEM_NONE, 0
