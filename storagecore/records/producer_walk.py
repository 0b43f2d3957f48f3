"""The producer walk of a file region, one implementation chosen at import (as scan.py does).

:func:`producer_batches` finds, in one call over a region of a ``.log`` file, the batches that
carry a producer id, which are all the producer and transaction state of a log is made of: the
C extension (storagecore/records/_headers.c, whose comment is the contract) when it is built,
else the pure-Python reference :mod:`storagecore.records._headers_py`.
``STORAGECORE_NO_EXTENSIONS=1`` forces the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from storagecore.native import load_extension
from storagecore.records import _headers_py

ProducerBatches = Callable[[bytes | bytearray | memoryview], tuple[int, int, bytes, int, int]]
ProducerBatchesFile = Callable[[int, int, int], tuple[int, int, bytes, bytes, int, int]]

_NATIVE = load_extension("storagecore.records._native")
producer_batches: Final[ProducerBatches] = (
    _headers_py.producer_batches if _NATIVE is None else _NATIVE.producer_batches
)
#: The same walk over a file's bytes [start, end), reading only the headers of large batches
#: (None without the extension; the reference reads the file in chunks for producer_batches).
producer_batches_file: Final[ProducerBatchesFile | None] = (
    None if _NATIVE is None else _NATIVE.producer_batches_file
)
PROBLEM_SHORT_LENGTH: Final = _headers_py.PROBLEM_SHORT_LENGTH
PROBLEM_SHORT_V2: Final = _headers_py.PROBLEM_SHORT_V2
#: "c" or "python": which implementation this process uses (tests assert it).
IMPLEMENTATION: Final[str] = "python" if _NATIVE is None else "c"
