"""Walk the records of an uncompressed batch payload: framing, timestamps, null keys.

Two implementations behind one function, chosen once at import (aiokafka's pattern): the C
extension ``storagecore.records._scan_c`` when it is built, else the pure-Python reference
:mod:`storagecore.records._scan_py`. ``STORAGECORE_NO_EXTENSIONS=1`` forces the reference; the
test suite runs both on the same inputs and asserts which one is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from storagecore.records import _scan_py
from storagecore.records.scan_types import ScanResult

_Scan = Callable[[bytes, int, int], ScanResult]


def _select() -> tuple[_Scan, str]:
    if os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0"):
        return _scan_py.scan_records, "python"
    try:
        from storagecore.records import _scan_c  # type: ignore[attr-defined]
    except ImportError:
        return _scan_py.scan_records, "python"

    def scan_native(payload: bytes, count: int, base_timestamp: int) -> ScanResult:
        return ScanResult(*_scan_c.scan_records(payload, count, base_timestamp))

    return scan_native, "c"


scan_records: Final[_Scan]
IMPLEMENTATION: Final[str]
scan_records, IMPLEMENTATION = _select()

__all__ = ["IMPLEMENTATION", "ScanResult", "scan_records"]
