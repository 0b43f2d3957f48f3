"""What the offset and time indexes share: a preallocated file of fixed-size entries.

Kafka's ``AbstractIndex``. A new or active index file is preallocated to ``max_index_size_bytes``
rounded down to a whole number of entries; ``entries`` counts the valid ones. On roll and close the
file is trimmed to ``entries * entry_size``. When an existing file is opened, every whole entry in
it is taken as valid (Kafka does the same), which is why the loader rebuilds the indexes of any
segment that recovery touches and sanity-checks the others.

Two ways to write entries, chosen once at import (storagecore.native):

* mapped (the extension ``storagecore.index._mapping``): an index being written is mapped
  (:class:`~storagecore.index._mapping.Mapping`, ``MAP_SHARED``) on its first write and its
  entries are stored into memory, as Kafka's; the mapping holds **no file descriptor** (the file
  is opened by path for the map, resize and fallocate calls and closed before they return), so
  the open-files bound of storagecore.file_cache holds. Only the indexes being written are
  mapped (the active segments'): a trim (roll, close) unmaps, and an index that is only read is
  read with ``pread`` through the file cache. Mappings count against ``vm.max_map_count``
  (65,530 by default): at most two per partition with appends since its last roll.
* unmapped (``STORAGECORE_NO_EXTENSIONS=1`` or the extension not built): each entry is written
  with one ``pwrite`` through the index's file handle.
"""

from __future__ import annotations

import array
import bisect
import contextlib
import logging
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from storagecore import durability, file_cache
from storagecore.errors import CorruptIndexError
from storagecore.file_cache import FileCache, Handle, OpenFile, open_handle
from storagecore.native import load_extension

if TYPE_CHECKING:
    from storagecore.index import _mapping  # typed by _mapping.pyi

logger = logging.getLogger(__name__)

_RESERVE_CHUNK = 64 * 1024

_MAPPING = load_extension("storagecore.index._mapping")
#: Whether indexes being written are mapped (the extension is loaded), else written with pwrite.
MAPPED: Final = _MAPPING is not None
#: "c" when the mapping extension is used, "python" for the pwrite reference.
IMPLEMENTATION: Final = "c" if MAPPED else "python"


@contextlib.contextmanager
def _descriptor_for_one_call(path: Path, flags: int) -> Iterator[int]:
    """A descriptor of ``path`` closed after the block (one ``ftruncate``, ``posix_fallocate``
    or ``fsync``), as Kafka's resize opens a RandomAccessFile: a mapped index keeps none. Its
    EMFILE, ENFILE or ENOMEM is the caller's resource error (storagecore.file_cache)."""
    fd = file_cache.open_fd(path, flags | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


class AbstractIndex:
    """Entries of ``entry.size`` bytes, sorted by offset (and for the time index by timestamp).

    Written through a mapping that holds no descriptor (or, unmapped, with ``pwrite``: see the
    module docstring). An index not mapped has its valid entries read into memory on first use
    (one ``pread``). Given a :class:`~storagecore.file_cache.FileCache` the descriptor is opened
    only for those calls and closed by the cache when idle, and the entries in memory are
    dropped with it (the cache bounds both). Nothing is opened at construction for an existing
    file that is not writable (an inactive segment's index: the loader's case), and a mapped
    index keeps no descriptor open for its writes."""

    entry: struct.Struct
    # The dict and weak references the class had without __slots__, and the native
    # append's slots (storagecore/records/_slots.h).
    __slots__ = (
        "__dict__",
        "__weakref__",
        "_columns",
        "_dirty",
        "_last",
        "_mapping",
        "_reserved",
        "entries",
        "max_entries",
    )

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
        if cache is None or ((new_file or writable) and not MAPPED):
            self._handle: Handle = open_handle(
                path, os.O_RDWR, cache, create=new_file, on_close=self._drop_entries
            )
        else:
            # Mapped, a file to write is created and sized by _set_length below, not through
            # the cache: no idle descriptor of it is left there.
            self._handle = cache.file(path, os.O_RDWR, on_close=self._drop_entries)
        # The mapping entries are written into (MAPPED), made on the first write and dropped
        # by a trim: None while the index is only read.
        self._mapping: _mapping.Mapping | None = None
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
        # Unmapped, where the native append writes the one entry it is due (native_target).
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

    def _entries_buffer(self) -> _mapping.Mapping | bytearray:
        """The valid entries as a buffer: the mapping (longer than the valid entries) when the
        index is mapped, else :meth:`_entries_bytes`."""
        mapping = self._mapping
        if mapping is not None:
            return mapping
        return self._entries_bytes()

    def _valid_bytes(self) -> bytes | bytearray:
        """Exactly the valid entries' bytes (a copy when mapped)."""
        size = self.entries * self.entry.size
        mapping = self._mapping
        if mapping is None:
            return self._entries_bytes()[:size] if size else b""
        with memoryview(mapping) as view:
            return view[:size].tobytes()

    def _map(self) -> _mapping.Mapping:
        """Map the file to write entries into it (the first write since it was opened or
        trimmed). An OSError here (EMFILE, ENFILE, ENOMEM included) comes before anything of
        the write that needs it."""
        assert _MAPPING is not None
        mapping: _mapping.Mapping = _MAPPING.Mapping(self.path)
        if mapping.length != self._length:
            mapping.close()
            raise AssertionError(
                f"{self.path}: {mapping.length} bytes on disk where the index set {self._length}"
            )
        self._mapping = mapping
        self._data = None  # read from the mapping from now on
        return mapping

    def _unmap(self) -> None:
        mapping, self._mapping = self._mapping, None
        if mapping is not None:
            mapping.close()

    @property
    def mapped(self) -> bool:
        """Whether the index is mapped now (written since it was opened or last trimmed)."""
        return self._mapping is not None

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
        mapping = self._mapping
        if mapping is not None:
            try:
                mapping.resize(length)
            except OSError:
                if not mapping.closed:
                    raise  # the file could not be opened or truncated: nothing changed
                # The file has its new length, only the new mapping failed (ENOMEM): unmapped
                # now, mapped again by the next write; the caller gets the error.
                self._mapping = None
                self._length_set(length)
                raise
        elif MAPPED:
            with _descriptor_for_one_call(self.path, os.O_RDWR | os.O_CREAT) as fd:
                os.ftruncate(fd, length)
        else:
            with self._handle.pinned() as fd:
                os.ftruncate(fd, length)
        self._length_set(length)

    def _length_set(self, length: int) -> None:
        """The bookkeeping of a file now ``length`` bytes long."""
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
        """Trim to the valid entries (roll, close, recovery's end): no room is left to write,
        so a mapped index is unmapped first."""
        self._unmap()
        self.resize(self.size_bytes)

    def reset(self) -> None:
        """Drop every entry and preallocate again (recovery rebuilds from the log)."""
        self._truncate_to_entries(0)
        self._set_length(0)
        self._set_length(self._rounded(self._max_index_size_bytes))

    # -- entries -------------------------------------------------------------------------------
    def _entry(self, n: int) -> tuple[int, ...]:
        assert 0 <= n < self.entries, (self.path, n, self.entries)
        return self.entry.unpack_from(self._entries_buffer(), n * self.entry.size)

    def _last_raw(self) -> tuple[int, ...]:
        last = self._last
        if last is None:
            last = self._last = self._entry(self.entries - 1)
        return last

    def reserve_next(self) -> None:
        """Give the next entry's bytes disk blocks (``posix_fallocate``, 64 KiB at a time), so
        that a full filesystem fails here with ENOSPC, before anything is written. (Kafka
        preallocates sparse files and maps them: a full disk is a SIGBUS there.) Mapped, the
        index is mapped here too, so that no write after this one needs a descriptor."""
        end = (self.entries + 1) * self.entry.size
        if end > self._length:
            return
        mapping = self._mapping
        if mapping is None and MAPPED:
            mapping = self._map()
        if end <= self._reserved:
            return
        upto = min(self._length, -(-end // _RESERVE_CHUNK) * _RESERVE_CHUNK)
        with (
            _descriptor_for_one_call(self.path, os.O_RDWR)
            if mapping is not None
            else self._handle.pinned()
        ) as fd:
            os.posix_fallocate(fd, self._reserved, upto - self._reserved)
        self._reserved = upto

    def next_entry_reserved(self) -> bool:
        """Whether :meth:`reserve_next` has nothing to do (the next entry has its blocks and,
        mapped, the index its mapping)."""
        end = (self.entries + 1) * self.entry.size
        if end > self._length:
            return True
        return end <= self._reserved and (self._mapping is not None or not MAPPED)

    def native_target(
        self, *, reserve: bool
    ) -> tuple[_mapping.Mapping | bytearray | None, int] | None:
        """Where the native append (storagecore.records.scan.append_to_segment, which reads the
        common case itself and asks this method otherwise) writes the entry it is due, and the
        entry it writes there: the mapping and the next entry, or unmapped a one-entry buffer
        (entry 0) that :meth:`entry_written` then writes to the file. With ``reserve`` the
        entry's disk blocks are reserved (and the index mapped) first, so that a full disk or a
        missing descriptor fails here, before anything is written; without it None when they
        are not (an entry due now: the general path reserves them after validating,
        :meth:`storagecore.segment.LogSegment.append`). ``(None, 0)`` when the
        index is full: the general path rolls."""
        entries = self.entries
        mapping = self._mapping
        if mapping is not None and (entries + 1) * self.entry.size <= self._reserved:
            return mapping, entries  # the common case, in one test
        if entries >= self.max_entries:
            return None, 0
        if not self.next_entry_reserved():
            if not reserve:
                return None
            self.reserve_next()
        mapping = self._mapping
        return (self._scratch, 0) if mapping is None else (mapping, entries)

    def entry_written(self, values: tuple[int, ...]) -> None:
        """The entry the native append was due, written into :meth:`native_target`: mapped, it
        is in place and counted here; unmapped, it goes to the file with one ``pwrite``."""
        if self._mapping is None:
            self._write_entry(values)
            return
        assert self.entries < self.max_entries, (self.path, self.entries)
        self._dirty = True
        self.entries += 1
        self._last = values
        if self._columns:
            for field, column in self._columns.items():
                column.append(values[field])

    def _write_entry(self, values: tuple[int, ...]) -> None:
        if self.entries >= self.max_entries:
            raise AssertionError(f"{self.path}: append to a full index ({self.entries} entries)")
        if (self.entries + 1) * self.entry.size > self._reserved or (
            MAPPED and self._mapping is None
        ):
            self.reserve_next()
        mapping = self._mapping
        if mapping is not None:
            self.entry.pack_into(mapping, self.entries * self.entry.size, *values)
            self.entry_written(values)
            return
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
            codes = self.entry.format[1:]
            typecode = codes[field]
            if all(code in "iI" for code in codes):
                # Entries of 32-bit fields only (the offset index): the field's words at C
                # speed, every len(codes)-th from its own (a generator over the entries costs a
                # Python step each: ~60k for a full 1 GiB segment's index, at every first lookup).
                column = self._entry_words(typecode)[field :: len(codes)]
            else:
                raw = self._valid_bytes()
                column = array.array(typecode, (e[field] for e in self.entry.iter_unpack(raw)))
            columns[field] = column
        return column

    def _entry_words(self, typecode: str) -> array.array[int]:
        """The valid entries as big-endian 32-bit words (``typecode`` "i" or "I") in a native
        array, read at C speed: for checks over all entries, which would otherwise be a Python
        loop over the mmap. Every entry format here is made of whole 32-bit words."""
        words = array.array(typecode)
        if self.entries:
            words.frombytes(self._valid_bytes())
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
        """msync of the mapping (Kafka's ``MappedByteBuffer.force``), or ``fsync`` when not
        mapped (a trim unmapped it: the written pages are in the page cache either way)."""
        if not self._dirty or self._handle.closed:
            return
        mapping = self._mapping
        if mapping is not None:
            durability.flush_mmap(mapping)
        else:
            with (
                _descriptor_for_one_call(self.path, os.O_RDONLY)
                if MAPPED
                else self._handle.pinned()
            ) as fd:
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
            self._unmap()
        except BufferError as exc:  # a bug: nothing holds an index's buffer past one call
            raise AssertionError(f"{self.path}: closed while its mapping is in use") from exc
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
        if self._mapping is not None:
            self._mapping.path = target  # the mapping follows the inode; resizes open the name

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
