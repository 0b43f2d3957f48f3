"""Walk the records of an uncompressed batch payload: framing, timestamps, null keys.

Two implementations behind one function, chosen once at import (aiokafka's pattern): the C
extension ``storagecore.records._native`` when it is built, else the pure-Python reference
:mod:`storagecore.records._scan_py`. ``STORAGECORE_NO_EXTENSIONS=1`` forces the reference; the
test suite runs both on the same inputs and asserts which one is loaded.

The extension also offers :data:`validate_uncompressed`, a whole-request fast path for the
append validator (None without the extension): it accepts only what the Python validator
accepts, with identical output bytes, and otherwise hands the request back to it; and
:data:`append_to_segment`, the same validation fused with the active segment's write and
bookkeeping (the log's common-case append, :mod:`storagecore.native_append`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from storagecore.native import load_extension
from storagecore.records import _scan_py
from storagecore.records.scan_types import ScanResult

_Scan = Callable[[bytes | memoryview, int, int], ScanResult]
#: (out, next_offset, now_ms, client, replication, compact, max_message_bytes, leader_epoch,
#:  before_max_ms, after_max_ms) -> (first, last, max_ts, offset_of_max, records, batches) or
#:  None; see storagecore/records/_native.c.
ValidateUncompressed = Callable[
    [bytearray, int, int, bool, bool, bool, int, int, int, int],
    tuple[int, int, int, int, int, int] | None,
]
#: (settings, segment, fd, data, now_ms, client, replication, leader_epoch) ->
#:  (first, last, max_ts, offset_of_max, records, bytes written) when written (six ints),
#:  ValidatedRecords' eight fields and whether only producer ids kept it back when valid but
#:  not written, or None; see
#:  storagecore/records/_segment_append.c. ``segment`` is the active LogSegment (a layer above
#:  this module, hence ``object``).
NativeSettings = tuple[int, int, bool, int, int, int, bool]
AppendToSegment = Callable[
    [NativeSettings, object, int, bytes | bytearray | memoryview, int, bool, bool, int],
    tuple[Any, ...] | None,
]  # fmt: skip
#: (log, data) -> LogAppendInfo when written, None when nothing was done; see
#: storagecore/records/_log_append.c. (``log`` is a storagecore.log.Log, a layer above.)
AppendActive = Callable[[object, bytes | bytearray | memoryview], Any]
#: (native_append module, LogAppendInfo, SystemClock): what AppendActive needs of the layers
#: above, given once.
AppendActiveSetup = Callable[[object, type, type], None]
#: (settings, segment, fd, buffer, first_offset, last_offset, max_timestamp,
#:  offset_of_max_timestamp, now_ms) -> bytes written, or None (nothing written); see
#:  storagecore/records/_segment_append.c.
WriteToSegment = Callable[
    [NativeSettings, object, int, bytes | bytearray | memoryview, int, int, int, int, int],
    int | None,
]  # fmt: skip


_NATIVE = load_extension("storagecore.records._native")
# The native scan returns a plain tuple in ScanResult's field order; callers unpack it.
scan_records: Final[_Scan] = _scan_py.scan_records if _NATIVE is None else _NATIVE.scan_records
validate_uncompressed: Final[ValidateUncompressed | None] = (
    None if _NATIVE is None else _NATIVE.validate_uncompressed
)
append_to_segment: Final[AppendToSegment | None] = (
    None if _NATIVE is None else _NATIVE.append_to_segment
)
write_to_segment: Final[WriteToSegment | None] = (
    None if _NATIVE is None else _NATIVE.write_to_segment
)
append_active: Final[AppendActive | None] = None if _NATIVE is None else _NATIVE.append_active
append_active_setup: Final[AppendActiveSetup | None] = (
    None if _NATIVE is None else _NATIVE.append_active_setup
)
#: "c" or "python": which implementation this process uses (tests assert it).
IMPLEMENTATION: Final[str] = "python" if _NATIVE is None else "c"

__all__ = [
    "IMPLEMENTATION",
    "ScanResult",
    "append_active",
    "append_active_setup",
    "append_to_segment",
    "scan_records",
    "validate_uncompressed",
    "write_to_segment",
]
