"""Walk the records of an uncompressed batch payload: framing, timestamps, null keys.

Two implementations behind one function, chosen once at import (aiokafka's pattern): the C
extension ``storagecore.records._scan_c`` when it is built, else the pure-Python reference
:mod:`storagecore.records._scan_py`. ``STORAGECORE_NO_EXTENSIONS=1`` forces the reference; the
test suite runs both on the same inputs and asserts which one is loaded.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Final

from storagecore.records import _scan_py
from storagecore.records.scan_types import ScanResult

_Scan = Callable[[bytes | memoryview, int, int], ScanResult]


def _select() -> tuple[_Scan, str]:
    if os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0"):
        return _scan_py.scan_records, "python"
    try:
        native = importlib.import_module("storagecore.records._scan_c")
    except ImportError:
        return _scan_py.scan_records, "python"
    # The native function returns a plain tuple in ScanResult's field order; callers unpack it.
    native_scan: _Scan = native.scan_records
    return native_scan, "c"


_SELECTED = _select()
scan_records: Final[_Scan] = _SELECTED[0]
#: "c" or "python": which implementation this process uses (tests assert it).
IMPLEMENTATION: Final[str] = _SELECTED[1]

__all__ = ["IMPLEMENTATION", "ScanResult", "scan_records"]
