"""Offset index ``.index``: sparse (relative offset int32, position int32) entries.

An entry ``(offset, position)`` says that the batch holding ``offset`` starts at or after
``position`` in the ``.log``. Lookups return the largest entry whose offset is <= the target,
or ``(base_offset, 0)``.
"""

from __future__ import annotations

import array
import itertools
import operator
import struct
from typing import Final, NamedTuple

from storagecore.errors import CorruptIndexError
from storagecore.index.base import AbstractIndex

ENTRY: Final = struct.Struct(">ii")  # relative_offset, position
assert ENTRY.size == 8


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    entry = ENTRY

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty."""
        if self.entries == 0:
            return self.base_offset
        return self.base_offset + self._last_raw()[0]

    def entry_at(self, n: int) -> OffsetPosition:
        relative, position = self._entry(n)
        return OffsetPosition(self.base_offset + relative, position)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must increase strictly (a broken invariant otherwise)."""
        relative = offset - self.base_offset
        if not 0 <= relative <= 2**31 - 1:
            raise AssertionError(f"{self.path}: offset {offset} not relative-addressable")
        if self.entries and relative <= self._last_raw()[0]:
            raise AssertionError(
                f"{self.path}: offset {offset} appended after {self.last_offset} at entry "
                f"{self.entries}"
            )
        self._write_entry((relative, position))

    def lookup(self, target_offset: int) -> OffsetPosition:
        slot = self._largest_lower_bound_slot(target_offset, 0, relative=True)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry_at(slot)

    def columns(self) -> tuple[array.array[int], array.array[int]]:
        """The valid entries' relative offsets and positions, as the native int32 arrays that
        lookups bisect (storagecore.records.fetch searches them itself). The arrays are the
        index's own, extended by appends: read them under the log's lock, keep them no longer."""
        columns = self._columns
        offsets, positions = columns.get(0), columns.get(1)  # built once: the read's hot path
        if offsets is None or positions is None:
            return self._column(0), self._column(1)
        return offsets, positions

    def lookup_position(self, position: int, entries_back: int = 0) -> OffsetPosition:
        """The last entry whose position is <= ``position`` (or the one ``entries_back`` before
        it), or ``(base_offset, 0)``."""
        slot = self._largest_lower_bound_slot(position, 1, relative=False) - entries_back
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry_at(slot)

    def fetch_upper_bound_offset(self, fetch_offset: int, fetch_size: int) -> OffsetPosition | None:
        """The first entry whose position is at least ``fetch position + fetch_size``."""
        start = self.lookup(fetch_offset).position
        slot = self._smallest_upper_bound_slot(start + fetch_size, 1, relative=False)
        return None if slot < 0 else self.entry_at(slot)

    def _entries_in_order(self, log_size_bytes: int | None) -> bool:
        """The checks of sanity_check's entry loop over whole columns at C speed: True when
        every entry passes (the loop then need not run; it names the first that fails)."""
        words = self._entry_words("i")
        relative, positions = words[0::2], words[1::2]
        if not relative or relative[0] + self.base_offset <= -1 or positions[0] < -1:
            return False
        if not all(map(operator.lt, relative, itertools.islice(relative, 1, None))):
            return False
        if not all(map(operator.le, positions, itertools.islice(positions, 1, None))):
            return False
        return log_size_bytes is None or positions[-1] < max(log_size_bytes, 1)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        slot = self._largest_lower_bound_slot(offset, 0, relative=True)
        if slot < 0:
            self._truncate_to_entries(0)
        elif self.entry_at(slot).offset == offset:
            self._truncate_to_entries(slot)
        else:
            self._truncate_to_entries(slot + 1)

    def sanity_check(self, log_size_bytes: int | None = None) -> None:
        """Kafka's checks plus ours: entries increase and point inside the log."""
        self._check_length()
        if self.entries == 0:
            return
        if self.last_offset < self.base_offset:
            raise CorruptIndexError(
                f"{self.path}: last offset {self.last_offset} is below base offset "
                f"{self.base_offset}"
            )
        if self._entries_in_order(log_size_bytes):
            return
        previous = OffsetPosition(-1, -1)
        for n in range(self.entries):
            current = self.entry_at(n)
            if current.offset <= previous.offset or current.position < previous.position:
                raise CorruptIndexError(
                    f"{self.path}: entry {n} {tuple(current)} does not follow {tuple(previous)}"
                )
            if log_size_bytes is not None and current.position >= max(log_size_bytes, 1):
                raise CorruptIndexError(
                    f"{self.path}: entry {n} points at position {current.position}, past the "
                    f"{log_size_bytes}-byte log"
                )
            previous = current
