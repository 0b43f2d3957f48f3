"""Walk the records of an uncompressed batch payload: framing, timestamps, null keys.

Two implementations behind one function, chosen once at import (aiokafka's pattern): the C
extension ``storagecore.records._native`` when it is built, else the pure-Python reference
:mod:`storagecore.records._scan_py`. ``STORAGECORE_NO_EXTENSIONS=1`` forces the reference; the
test suite runs both on the same inputs and asserts which one is loaded.

The extension also offers :data:`validate_uncompressed`, a whole-request fast path for the
append validator (None without the extension): it accepts only what the Python validator
accepts, with identical output bytes, and otherwise hands the request back to it; and
:data:`append_uncompressed`, the same validation fused with the segment write (the log's
common-case append, :meth:`storagecore.native_append.NativeAppend.append`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from storagecore.native import load_extension
from storagecore.records import _scan_py
from storagecore.records.scan_types import ScanResult

if TYPE_CHECKING:
    from typing_extensions import Buffer

_Scan = Callable[[bytes | memoryview, int, int], ScanResult]
#: (out, next_offset, now_ms, client, replication, compact, max_message_bytes, leader_epoch,
#:  before_max_ms, after_max_ms) -> (first, last, max_ts, offset_of_max, records, batches) or
#:  None; see storagecore/records/_native.c.
ValidateUncompressed = Callable[
    [bytearray, int, int, bool, bool, bool, int, int, int, int],
    tuple[int, int, int, int, int, int] | None,
]
#: (data, fd, position, next_offset, now_ms, client, replication, compact, max_message_bytes,
#:  leader_epoch, before_max_ms, after_max_ms, segment_base_offset, max_timestamp_no_roll,
#:  offset_index, offset_entries, time_index, time_entries (writable buffers, the entry written
#:  at), time_last_timestamp,
#:  bytes_since_last_index_entry, index_interval_bytes, max_timestamp_so_far,
#:  offset_of_max_timestamp_so_far) ->
#:  (first, last, max_ts, offset_of_max, records, batches, unwritten bytes or None,
#:  index entries written) or None; see storagecore/records/_native.c.
AppendUncompressed = Callable[
    [bytes | bytearray | memoryview, int, int, int, int, bool, bool, bool, int, int, int, int,
     int, int, "Buffer | None", int, "Buffer | None", int, int, int, int, int,
     int],
    tuple[int, int, int, int, int, int, bytearray | None, int] | None,
]  # fmt: skip


_NATIVE = load_extension("storagecore.records._native")
# The native scan returns a plain tuple in ScanResult's field order; callers unpack it.
scan_records: Final[_Scan] = _scan_py.scan_records if _NATIVE is None else _NATIVE.scan_records
validate_uncompressed: Final[ValidateUncompressed | None] = (
    None if _NATIVE is None else _NATIVE.validate_uncompressed
)
append_uncompressed: Final[AppendUncompressed | None] = (
    None if _NATIVE is None else _NATIVE.append_uncompressed
)
#: "c" or "python": which implementation this process uses (tests assert it).
IMPLEMENTATION: Final[str] = "python" if _NATIVE is None else "c"

__all__ = [
    "IMPLEMENTATION",
    "ScanResult",
    "append_uncompressed",
    "scan_records",
    "validate_uncompressed",
]
