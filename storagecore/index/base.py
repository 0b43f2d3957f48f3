"""What the offset and time indexes share: a preallocated, memory-mapped file of fixed-size entries.

Kafka's ``AbstractIndex``. A new or active index file is preallocated to ``max_index_size_bytes``
rounded down to a whole number of entries; ``entries`` counts the valid ones. On roll and close the
file is trimmed to ``entries * entry_size``. When an existing file is opened, every whole entry in
it is taken as valid (Kafka does the same), which is why the loader rebuilds the indexes of any
segment that recovery touches and sanity-checks the others.
"""

from __future__ import annotations

import array
import bisect
import logging
import mmap
import os
import struct
import sys
from pathlib import Path

from storagecore import durability
from storagecore.errors import CorruptIndexError

logger = logging.getLogger(__name__)

_RESERVE_CHUNK = 64 * 1024


class AbstractIndex:
    """Entries of ``entry.size`` bytes, sorted by offset (and for the time index by timestamp)."""

    entry: struct.Struct

    def __init__(
        self, path: Path, base_offset: int, max_index_size_bytes: int, writable: bool = True
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self._max_index_size_bytes = max_index_size_bytes
        new_file = not path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        length = os.fstat(self._fd).st_size
        # Invariant: entries * entry.size <= file length; the entries are the valid prefix.
        self.entries = length // self.entry.size
        # Bytes of the file known to have disk blocks (the entries written so far, then each
        # reserve_next chunk): the preallocated rest is sparse, and a first write into a sparse
        # page of the mapping on a full filesystem would kill the process with SIGBUS.
        self._reserved = self.entries * self.entry.size
        # Last entry, cached for the append path; None means "read it from the file".
        self._last: tuple[int, ...] | None = None
        # Searched columns (relative offsets, positions, timestamps) as native arrays, built on
        # the first lookup and extended by appends, so lookups are a C-level bisect instead of a
        # Python loop over the mmap. Each costs half the index's valid bytes (int32) or as much
        # (int64); dropped whenever entries are truncated or reset.
        self._columns: dict[int, array.array[int]] = {}
        self._mmap: mmap.mmap | None = None
        if new_file or writable:
            self._set_length(self._rounded(max_index_size_bytes) if writable else length)
        else:
            self._map(length)

    # -- sizing --------------------------------------------------------------------------------
    def _rounded(self, size: int) -> int:
        return max(size - size % self.entry.size, 0)

    @property
    def length_bytes(self) -> int:
        return self._length

    @property
    def size_bytes(self) -> int:
        """Bytes of valid entries."""
        return self.entries * self.entry.size

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _map(self, length: int) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        self._length = length
        #: Entries the file can hold at its current length.
        self.max_entries = length // self.entry.size
        if length > 0:
            self._mmap = mmap.mmap(self._fd, length)

    def _set_length(self, length: int) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        os.ftruncate(self._fd, length)
        self._reserved = min(self._reserved, length)
        self.entries = min(self.entries, length // self.entry.size)
        self._last = None
        self._columns.clear()
        self._map(length)

    def resize(self, new_size_bytes: int) -> bool:
        """Grow or shrink the file (whole entries); return whether the length changed."""
        rounded = max(self._rounded(new_size_bytes), self.size_bytes)
        if rounded == self._length:
            return False
        self._set_length(rounded)
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(self.size_bytes)

    def reset(self) -> None:
        """Drop every entry and preallocate again (recovery rebuilds from the log)."""
        self.entries = 0
        self._last = None
        self._columns.clear()
        self._set_length(0)
        self._set_length(self._rounded(self._max_index_size_bytes))

    # -- entries -------------------------------------------------------------------------------
    def _entry(self, n: int) -> tuple[int, ...]:
        assert self._mmap is not None and 0 <= n < self.entries
        return self.entry.unpack_from(self._mmap, n * self.entry.size)

    def _last_raw(self) -> tuple[int, ...]:
        if self._last is None:
            self._last = self._entry(self.entries - 1)
        return self._last

    def reserve_next(self) -> None:
        """Give the next entry's bytes disk blocks (``posix_fallocate``, 64 KiB at a time), so
        that a full filesystem fails here with ENOSPC, before anything is written, instead of
        with SIGBUS when the mapped page is first touched. Kafka preallocates sparse files and
        has that SIGBUS."""
        end = (self.entries + 1) * self.entry.size
        if end <= self._reserved or end > self._length:
            return
        upto = min(self._length, -(-end // _RESERVE_CHUNK) * _RESERVE_CHUNK)
        os.posix_fallocate(self._fd, self._reserved, upto - self._reserved)
        self._reserved = upto

    def next_entry_reserved(self) -> bool:
        """Whether :meth:`reserve_next` has nothing to do (the next entry has its blocks)."""
        end = (self.entries + 1) * self.entry.size
        return end <= self._reserved or end > self._length

    @property
    def mapping(self) -> mmap.mmap | None:
        """The writable mapping of the file (None while it has no length), for the native
        append, which writes an entry into it and then reports it with :meth:`entry_written`."""
        return self._mmap

    def entry_written(self, values: tuple[int, ...]) -> None:
        """The entry ``values`` was written into the mapping at slot :attr:`entries` by the
        native append, with the checks of :meth:`_write_entry` (its blocks reserved, room left,
        the order kept); count it as appended."""
        self.entries += 1
        self._last = values
        for field, column in self._columns.items():
            column.append(values[field])

    def _write_entry(self, values: tuple[int, ...]) -> None:
        if self.entries >= self.max_entries:
            raise AssertionError(f"{self.path}: append to a full index ({self.entries} entries)")
        assert self._mmap is not None
        if (self.entries + 1) * self.entry.size > self._reserved:
            self.reserve_next()
        self.entry.pack_into(self._mmap, self.entries * self.entry.size, *values)
        self.entries += 1
        self._last = values
        for field, column in self._columns.items():
            column.append(values[field])

    def _column(self, field: int) -> array.array[int]:
        """One column of the entries as a native array, built once and extended by appends."""
        column = self._columns.get(field)
        if column is None:
            assert self._mmap is not None or self.entries == 0
            raw = self._mmap[: self.entries * self.entry.size] if self._mmap is not None else b""
            typecode = self.entry.format[1 + field]
            column = array.array(typecode, (e[field] for e in self.entry.iter_unpack(raw)))
            self._columns[field] = column
        return column

    def _entry_words(self, typecode: str) -> array.array[int]:
        """The valid entries as big-endian 32-bit words (``typecode`` "i" or "I") in a native
        array, read at C speed: for checks over all entries, which would otherwise be a Python
        loop over the mmap. Every entry format here is made of whole 32-bit words."""
        words = array.array(typecode)
        if self.entries and self._mmap is not None:
            words.frombytes(self._mmap[: self.entries * self.entry.size])
            if sys.byteorder == "little":
                words.byteswap()
        return words

    def _largest_lower_bound_slot(self, target: int, key_field: int, relative: bool) -> int:
        """Slot of the largest entry whose ``key_field`` is <= target, or -1."""
        if self.entries == 0:
            return -1
        key = target - self.base_offset if relative else target
        return bisect.bisect_right(self._column(key_field), key) - 1

    def _smallest_upper_bound_slot(self, target: int, key_field: int, relative: bool) -> int:
        """Slot of the smallest entry whose key is >= target, or -1."""
        if self.entries == 0:
            return -1
        key = target - self.base_offset if relative else target
        lo, hi = 0, self.entries - 1
        if self._entry(hi)[key_field] < key:
            return -1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entry(mid)[key_field] >= key:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _truncate_to_entries(self, entries: int) -> None:
        self.entries = entries
        self._last = None
        self._columns.clear()

    def flush(self) -> None:
        if self._mmap is not None:
            durability.flush_mmap(self._mmap)

    def close(self) -> None:
        if self._fd < 0:
            return
        self.trim_to_valid_size()
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        os.close(self._fd)
        self._fd = -1

    def close_without_trim(self) -> None:
        """Close handles only (an offline dir, the loader's throw-away opens, crash tests)."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            if self._mmap is not None:
                self._mmap.close()
                self._mmap = None
            os.close(fd)
        except (OSError, ValueError) as exc:
            logger.warning("Closing %s failed: %s", self.path, exc)

    def rename_to(self, target: Path) -> None:
        durability.rename(self.path, target)
        self.path = target

    def delete(self) -> None:
        self.close_without_trim()
        self.path.unlink(missing_ok=True)

    def _check_length(self) -> None:
        length = os.fstat(self._fd).st_size
        if length % self.entry.size:
            raise CorruptIndexError(
                f"{self.path}: length {length} is not a multiple of the "
                f"{self.entry.size}-byte entry"
            )
