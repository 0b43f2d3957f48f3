"""The read by offset of one segment's ``.log`` in one native call (as scan.py, a speed-up
chosen once at import).

:data:`read_by_offset` is LogSegment.read's bytes path (the batch holding the fetch offset,
the fetch range, the offset after its last complete batch) without Python between its system
calls: the C extension (storagecore/records/_fetch.c, whose comment is the contract) when it is
built, else None. It hands back (returns None) whatever it does not handle exactly as the
Python path does (legacy v0/v1 entries, headers that path would reject); that path,
:class:`storagecore.segment_read.SegmentReads`, is the reference, and the only path with
``STORAGECORE_NO_EXTENSIONS=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from storagecore.native import load_extension

if TYPE_CHECKING:
    from typing_extensions import Buffer

#: (fd, offsets, positions, base_offset, fetch_offset, max_size, max_position, size_bytes,
#:  min_one_message) -> (position, records, incomplete, next_offset) or None; see _fetch.c.
ReadByOffset = Callable[
    [int, "Buffer", "Buffer", int, int, int, int, int, bool], tuple[int, bytes, bool, int] | None
]

#: The position :data:`read_by_offset` returns when no batch reaches the fetch offset.
NOT_FOUND: Final = -1
#: The next offset it returns when the records reach the end of the file: the segment's own.
SEGMENT_END: Final = -1

_NATIVE = load_extension("storagecore.records._native")
read_by_offset: Final[ReadByOffset | None] = None if _NATIVE is None else _NATIVE.read_by_offset
#: "c" or "python": which implementation this process uses (tests assert it).
IMPLEMENTATION: Final[str] = "python" if _NATIVE is None else "c"

__all__ = ["IMPLEMENTATION", "NOT_FOUND", "SEGMENT_END", "ReadByOffset", "read_by_offset"]
