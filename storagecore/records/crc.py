"""CRC-32C (Castagnoli), the batch checksum of magic v2.

Backed by the ``crc32c`` package (hardware instructions where the CPU has them, a C table
otherwise). There is deliberately no pure-Python fallback: at ~12 MB/s it would make the append
and recovery paths 1000x slower without anybody noticing (kafka-python's silent fallback).
"""

from __future__ import annotations

from collections.abc import Callable

import crc32c as _crc32c_package

#: CRC-32C of a bytes-like object, as an unsigned 32-bit int (the package's C function itself:
#: this sits on the append path, where even a Python wrapper call shows up).
crc32c: Callable[[bytes | bytearray | memoryview], int] = _crc32c_package.crc32c


assert crc32c(b"123456789") == 0xE3069283, "crc32c package does not compute CRC-32C"
