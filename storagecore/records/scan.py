"""Walk the records of an uncompressed batch payload: framing, timestamps, null keys.

Two implementations behind one function, chosen once at import (aiokafka's pattern): the C
extension ``storagecore.records._native`` when it is built, else the pure-Python reference
:mod:`storagecore.records._scan_py`. ``STORAGECORE_NO_EXTENSIONS=1`` forces the reference; the
test suite runs both on the same inputs and asserts which one is loaded.

The extension also offers :data:`validate_uncompressed`, a whole-request fast path for the
append validator (None without the extension): it accepts only what the Python validator
accepts, with identical output bytes, and otherwise hands the request back to it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Final

from storagecore.records import _scan_py
from storagecore.records.scan_types import ScanResult

_Scan = Callable[[bytes | memoryview, int, int], ScanResult]
#: (out, next_offset, now_ms, client, replication, compact, max_message_bytes, leader_epoch,
#:  before_max_ms, after_max_ms, crc32c) -> (first, last, max_ts, offset_of_max, records,
#:  batches) or None; see storagecore/records/_native.c.
ValidateUncompressed = Callable[
    [bytearray, int, int, bool, bool, bool, int, int, int, int, Callable[..., int]],
    tuple[int, int, int, int, int, int] | None,
]


def _load_native() -> ModuleType | None:
    if os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("storagecore.records._native")
    except ImportError:
        return None


_NATIVE = _load_native()
# The native scan returns a plain tuple in ScanResult's field order; callers unpack it.
scan_records: Final[_Scan] = _scan_py.scan_records if _NATIVE is None else _NATIVE.scan_records
validate_uncompressed: Final[ValidateUncompressed | None] = (
    None if _NATIVE is None else _NATIVE.validate_uncompressed
)
#: "c" or "python": which implementation this process uses (tests assert it).
IMPLEMENTATION: Final[str] = "python" if _NATIVE is None else "c"

__all__ = ["IMPLEMENTATION", "ScanResult", "scan_records", "validate_uncompressed"]
