"""CRC-32C (Castagnoli), the batch checksum of magic v2.

The records extension's (``storagecore.records._native.crc32c``: hardware instructions, three
streams at once, where the CPU has them; a C table otherwise), or under
STORAGECORE_NO_EXTENSIONS=1 the ``crc32c`` package's, which computes the same the same way.
The package is imported only then: its import pulls in importlib.metadata (~20 ms of every
``logkeeper`` command's start). There is deliberately no pure-Python fallback: at ~12 MB/s it
would make the append and recovery paths 1000x slower without anybody noticing
(kafka-python's silent fallback).
"""

from __future__ import annotations

from collections.abc import Callable

from storagecore.native import load_extension

_native = load_extension("storagecore.records._native")

#: CRC-32C of a bytes-like object, as an unsigned 32-bit int (the C function itself: this sits
#: on the append path, where even a Python wrapper call shows up).
crc32c: Callable[[bytes | bytearray | memoryview], int]
if _native is not None:
    crc32c = _native.crc32c
else:
    import crc32c as _crc32c_package

    crc32c = _crc32c_package.crc32c


assert crc32c(b"123456789") == 0xE3069283, "crc32c does not compute CRC-32C"
