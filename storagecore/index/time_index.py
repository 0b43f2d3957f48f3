"""Time index ``.timeindex``: sparse (timestamp int64, relative offset int32) entries.

Entry ``(T, O)``: the largest timestamp seen up to offset ``O`` is ``T``. Both columns only grow;
a new entry is written only when the timestamp is strictly greater than the last one. One slot is
kept free for the entry forced when the segment becomes inactive or closes.
"""

from __future__ import annotations

import itertools
import operator
import struct
from typing import Final, NamedTuple

from storagecore.errors import CorruptIndexError
from storagecore.index.base import AbstractIndex
from storagecore.records.layout import NO_TIMESTAMP

ENTRY: Final = struct.Struct(">qi")  # timestamp_ms, relative_offset
assert ENTRY.size == 12


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    entry = ENTRY

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    def entry_at(self, n: int) -> TimestampOffset:
        timestamp, relative = self._entry(n)
        return TimestampOffset(timestamp, self.base_offset + relative)

    @property
    def last_entry(self) -> TimestampOffset:
        if self.entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        timestamp, relative = self._last_raw()
        return TimestampOffset(timestamp, self.base_offset + relative)

    @property
    def last_timestamp(self) -> int:
        """The last entry's timestamp, -1 when there is none (what :meth:`maybe_append`
        compares a new entry with)."""
        return self._last_raw()[0] if self.entries else NO_TIMESTAMP

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` exceeds the last entry's."""
        entries = self.entries
        if not skip_full_check and entries >= self.max_entries - 1:
            raise AssertionError(f"{self.path}: append to a full time index")
        relative = offset - self.base_offset
        if entries:
            last_timestamp, last_relative = self._last_raw()
            if relative < last_relative:
                raise AssertionError(
                    f"{self.path}: offset {offset} appended after "
                    f"{self.base_offset + last_relative} at entry {entries}"
                )
            if timestamp < last_timestamp:
                raise AssertionError(
                    f"{self.path}: timestamp {timestamp} appended after {last_timestamp}"
                )
        else:
            last_timestamp = NO_TIMESTAMP
        if timestamp > last_timestamp:
            if not 0 <= relative <= 2**31 - 1:
                raise AssertionError(f"{self.path}: offset {offset} not relative-addressable")
            if self.entries >= self.max_entries:
                self.resize(self.length_bytes + self.entry.size)
            self._write_entry((timestamp, relative))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= target, or ``(-1, base_offset)``."""
        slot = self._largest_lower_bound_slot(target_timestamp, 0, relative=False)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry_at(slot)

    def _entries_in_order(self) -> bool:
        """The checks of sanity_check's entry loop over whole columns at C speed: True when
        every entry passes (the loop then need not run; it names the first that fails)."""
        signed, unsigned = self._entry_words("i"), self._entry_words("I")
        if not signed:
            return False
        # A timestamp is its high word (signed) then its low word (unsigned): timestamps grow
        # strictly when these pairs do.
        timestamps = list(zip(signed[0::3], unsigned[1::3], strict=True))
        relative = signed[2::3]
        first_timestamp = signed[0] << 32 | unsigned[1]
        if first_timestamp <= NO_TIMESTAMP - 1 or relative[0] + self.base_offset < -1:
            return False
        if not all(map(operator.lt, timestamps, itertools.islice(timestamps, 1, None))):
            return False
        return all(map(operator.le, relative, itertools.islice(relative, 1, None)))

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        kept = self.entries
        while kept and self.entry_at(kept - 1).offset >= offset:
            kept -= 1
        self._truncate_to_entries(kept)

    def sanity_check(self, next_offset: int | None = None) -> None:
        self._check_length()
        if self.entries == 0:
            return
        first, last = self.entry_at(0), self.last_entry
        if last.timestamp < first.timestamp:
            raise CorruptIndexError(
                f"{self.path}: last timestamp {last.timestamp} is below the first {first.timestamp}"
            )
        if last.offset < self.base_offset:
            raise CorruptIndexError(
                f"{self.path}: last offset {last.offset} is below base offset {self.base_offset}"
            )
        if next_offset is not None and last.offset >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(
                f"{self.path}: entry for offset {last.offset} is past the segment end {next_offset}"
            )
        if self._entries_in_order():
            return
        previous = TimestampOffset(NO_TIMESTAMP - 1, -1)
        for n in range(self.entries):
            current = self.entry_at(n)
            if current.timestamp <= previous.timestamp or current.offset < previous.offset:
                raise CorruptIndexError(
                    f"{self.path}: entry {n} {tuple(current)} does not follow {tuple(previous)}"
                )
            previous = current
