"""What the offset and time indexes share: a preallocated file of fixed-size entries.

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
import os
import struct
import sys
from pathlib import Path

from storagecore import durability
from storagecore.errors import CorruptIndexError
from storagecore.file_cache import FileCache, Handle, OpenFile, open_handle

logger = logging.getLogger(__name__)

_RESERVE_CHUNK = 64 * 1024


class AbstractIndex:
    """Entries of ``entry.size`` bytes, sorted by offset (and for the time index by timestamp).

    The valid entries are read into memory on first use (one ``pread``) and appended to with
    ``pwrite``: no mapping, so that an index holds no descriptor once read (a Python 3.11
    ``mmap`` keeps a duplicate of its file's). Given a
    :class:`~storagecore.file_cache.FileCache` the descriptor is opened only for those calls and
    closed by the cache when idle, and the entries in memory are dropped with it (the cache
    bounds both). Nothing is opened at construction for an existing file that is not writable
    (an inactive segment's index: the loader's case)."""

    entry: struct.Struct

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size_bytes: int,
        writable: bool = True,
        *,
        cache: FileCache | None = None,
        deferred: bool = False,
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self._max_index_size_bytes = max_index_size_bytes
        # ``deferred`` (an existing, read-only index through a cache: the loader's inactive
        # segments): not even a stat now; the owner calls load_length() before first use.
        self.length_pending = deferred and cache is not None and not writable
        try:
            length = 0 if self.length_pending else os.stat(path).st_size
            new_file = False
        except FileNotFoundError:
            length = 0
            new_file = True
        if cache is None or new_file or writable:
            self._handle: Handle = open_handle(
                path, os.O_RDWR, cache, create=new_file, on_close=self._drop_entries
            )
        else:
            self._handle = cache.file(path, os.O_RDWR, on_close=self._drop_entries)
        # Invariant: entries * entry.size <= file length; the entries are the valid prefix.
        self.entries = length // self.entry.size
        # Bytes of the file known to have disk blocks (the entries written so far, then each
        # reserve_next chunk): the preallocated rest is sparse, and writing into a hole of a
        # full filesystem fails; reserve_next makes it fail before anything else is written.
        self._reserved = self.entries * self.entry.size
        # Last entry, cached for the append path; None means "read it from the entries".
        self._last: tuple[int, ...] | None = None
        # The valid entries' bytes, read on first use; None when not read (or dropped by the
        # cache). Readers take a local reference: the cache may drop it from another thread.
        self._data: bytearray | None = None
        # Where the native append writes the one entry it is due (native_scratch).
        self._scratch = bytearray(self.entry.size)
        # Searched columns (relative offsets, positions, timestamps) as native arrays, built on
        # the first lookup and extended by appends, so lookups are a C-level bisect. Replaced
        # (never cleared in place) when entries are truncated or reset, or dropped.
        self._columns: dict[int, array.array[int]] = {}
        # Entries written since the last flush (a read-only index never fsyncs).
        self._dirty = False
        self._length = length
        #: Entries the file can hold at its current length.
        self.max_entries = length // self.entry.size
        if new_file or writable:
            self._set_length(self._rounded(max_index_size_bytes) if writable else length)

    def load_length(self) -> None:
        """Read the file's length (the entries it holds) for an index opened ``deferred``."""
        if not self.length_pending:
            return
        length = os.stat(self.path).st_size
        self.entries = length // self.entry.size
        self._reserved = self.entries * self.entry.size
        self._length = length
        self.max_entries = length // self.entry.size
        self._last = None
        self._data = None
        self._columns = {}
        self.length_pending = False

    def _drop_entries(self) -> None:
        """The cache closed the descriptor: the entries read into memory go too."""
        self._data = None
        self._columns = {}

    def _entries_bytes(self) -> bytearray:
        """The valid entries' bytes, read from the file when not in memory."""
        data = self._data
        if data is None:
            size = self.entries * self.entry.size
            fd = self._handle.acquire()
            try:
                raw = os.pread(fd, size, 0) if size else b""
                while len(raw) < size:
                    more = os.pread(fd, size - len(raw), len(raw))
                    if not more:
                        raise CorruptIndexError(
                            f"{self.path}: {len(raw)} bytes where {self.entries} entries need "
                            f"{size}"
                        )
                    raw += more
            finally:
                self._handle.release()
            data = bytearray(raw)
            self._data = data
        return data

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

    def _set_length(self, length: int) -> None:
        with self._handle.pinned() as fd:
            os.ftruncate(fd, length)
        self._reserved = min(self._reserved, length)
        entries = min(self.entries, length // self.entry.size)
        if entries != self.entries:
            self._truncate_to_entries(entries)
        self._length = length
        self.max_entries = length // self.entry.size

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
        self._truncate_to_entries(0)
        self._set_length(0)
        self._set_length(self._rounded(self._max_index_size_bytes))

    # -- entries -------------------------------------------------------------------------------
    def _entry(self, n: int) -> tuple[int, ...]:
        assert 0 <= n < self.entries, (self.path, n, self.entries)
        return self.entry.unpack_from(self._entries_bytes(), n * self.entry.size)

    def _last_raw(self) -> tuple[int, ...]:
        last = self._last
        if last is None:
            last = self._last = self._entry(self.entries - 1)
        return last

    def reserve_next(self) -> None:
        """Give the next entry's bytes disk blocks (``posix_fallocate``, 64 KiB at a time), so
        that a full filesystem fails here with ENOSPC, before anything is written. (Kafka
        preallocates sparse files and maps them: a full disk is a SIGBUS there.)"""
        end = (self.entries + 1) * self.entry.size
        if end <= self._reserved or end > self._length:
            return
        upto = min(self._length, -(-end // _RESERVE_CHUNK) * _RESERVE_CHUNK)
        with self._handle.pinned() as fd:
            os.posix_fallocate(fd, self._reserved, upto - self._reserved)
        self._reserved = upto

    def next_entry_reserved(self) -> bool:
        """Whether :meth:`reserve_next` has nothing to do (the next entry has its blocks)."""
        end = (self.entries + 1) * self.entry.size
        return end <= self._reserved or end > self._length

    def native_scratch(self) -> bytearray | None:
        """One entry's bytes for the native append (storagecore.records.append_uncompressed) to
        write the entry it is due into, with that entry's disk blocks already reserved (so a full
        disk fails here, before anything is written); :meth:`entry_written` then writes it to the
        file. None when the index is full: the general path rolls."""
        if self.entries >= self.max_entries:
            return None
        if not self.next_entry_reserved():
            self.reserve_next()
        return self._scratch

    def entry_written(self, values: tuple[int, ...]) -> None:
        """The entry the native append was due (written into :meth:`native_scratch`), as
        :meth:`_write_entry` writes it: these indexes are not mapped (they hold no descriptor:
        storagecore.file_cache), so the entry goes to the file with one ``pwrite``."""
        self._write_entry(values)

    def _write_entry(self, values: tuple[int, ...]) -> None:
        if self.entries >= self.max_entries:
            raise AssertionError(f"{self.path}: append to a full index ({self.entries} entries)")
        if (self.entries + 1) * self.entry.size > self._reserved:
            self.reserve_next()
        raw = self.entry.pack(*values)
        position = self.entries * self.entry.size
        fd = self._handle.acquire()
        try:
            written = os.pwrite(fd, raw, position)
        finally:
            self._handle.release()
        if written != len(raw):
            raise OSError(f"{self.path}: short index write ({written} of {len(raw)} bytes)")
        self._dirty = True
        data = self._data
        if data is not None and len(data) == position:
            data += raw
        elif data is not None:
            self._data = None  # not the bytes it should extend: read again when needed
        self.entries += 1
        self._last = values
        for field, column in self._columns.items():
            column.append(values[field])

    def _column(self, field: int) -> array.array[int]:
        """One column of the entries as a native array, built once and extended by appends."""
        columns = self._columns
        column = columns.get(field)
        if column is None:
            raw = self._entries_bytes() if self.entries else b""
            typecode = self.entry.format[1 + field]
            column = array.array(typecode, (e[field] for e in self.entry.iter_unpack(raw)))
            columns[field] = column
        return column

    def _entry_words(self, typecode: str) -> array.array[int]:
        """The valid entries as big-endian 32-bit words (``typecode`` "i" or "I") in a native
        array, read at C speed: for checks over all entries, which would otherwise be a Python
        loop over the mmap. Every entry format here is made of whole 32-bit words."""
        words = array.array(typecode)
        if self.entries:
            words.frombytes(self._entries_bytes()[: self.entries * self.entry.size])
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
        self._columns = {}
        data = self._data
        if data is not None:
            del data[entries * self.entry.size :]

    def flush(self) -> None:
        if self._dirty and not self._handle.closed:
            with self._handle.pinned() as fd:
                durability.fsync_fd(fd)
            self._dirty = False

    def close(self) -> None:
        if self._handle.closed:
            return
        self.trim_to_valid_size()
        self._handle.close()
        self._drop_entries()

    def close_without_trim(self) -> None:
        """Close handles only (an offline dir, the loader's throw-away opens, crash tests)."""
        if self._handle.closed:
            return
        try:
            self._handle.close()
        except (OSError, ValueError) as exc:
            logger.warning("Closing %s failed: %s", self.path, exc)
        self._drop_entries()

    @property
    def handle(self) -> Handle:
        return self._handle

    def acquire(self) -> int:
        """The open descriptor, pinned until :meth:`release`."""
        return self._handle.acquire()

    def release(self) -> None:
        self._handle.release()

    def use_cache(self, cache: FileCache) -> None:
        """Open through ``cache`` from now on (see FileRecords.use_cache)."""
        if isinstance(self._handle, OpenFile) and not self._handle.closed:
            self._handle.close()
            self._handle = cache.file(self.path, os.O_RDWR, on_close=self._drop_entries)

    def rename_to(self, target: Path) -> None:
        durability.rename(self.path, target)
        self.path = target
        self._handle.path = target

    def delete(self) -> None:
        self.close_without_trim()
        self.path.unlink(missing_ok=True)

    def _check_length(self) -> None:
        length = os.stat(self.path).st_size
        if length % self.entry.size:
            raise CorruptIndexError(
                f"{self.path}: length {length} is not a multiple of the "
                f"{self.entry.size}-byte entry"
            )
