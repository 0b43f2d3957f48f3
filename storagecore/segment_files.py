"""The files of a log segment (``.log``, ``.index``, ``.timeindex``, ``.txnindex``): the part of
Kafka's LogSegment that names, opens, pins, renames and deletes them. :class:`LogSegment`
(storagecore.segment) is the rest: offsets, append, read, roll, recovery.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, cast

from storagecore import durability, files
from storagecore.file_cache import CachedFile, FileCache, Handle
from storagecore.index import MAPPED, OffsetIndex, TimeIndex
from storagecore.index.transaction_index import TransactionIndex
from storagecore.records.file_records import FileRecords


class UnopenedFiles(NamedTuple):
    """What :meth:`LogSegment.open` needs to build a deferred segment's three file objects on
    its first use (:meth:`LogSegment._open_files`), and the ``.log`` size found at load."""

    directory: Path
    prefix: str
    """The base offset's 20-digit file name prefix."""
    suffix: str
    max_index_size_bytes: int
    file_cache: FileCache
    size_bytes: int
    closed: bool = False


class SegmentFiles:
    """The files of one segment, by what they are called and where they are: built on first
    use for a segment loaded deferred, pinned open through the file cache for an append,
    renamed from one suffix to another (the swap and delete protocols), deleted."""

    base_offset: int
    file_cache: FileCache | None
    _unopened: UnopenedFiles | None
    _handles: tuple[CachedFile, ...] | None
    held_log: Handle | None
    """The ``.log``'s handle while :meth:`hold_files` holds the segment's files (check its
    ``held``: closing the file ends the hold); None otherwise."""
    _held: tuple[CachedFile, ...]
    _log: FileRecords
    _offset_index: OffsetIndex
    _time_index: TimeIndex

    def _open_files(self) -> None:
        """Build a deferred segment's FileRecords and indexes (nothing is opened: the cache
        opens descriptors on use), as :meth:`open` would have at load."""
        unopened = self._unopened
        if unopened is None:
            return
        name = f"{unopened.prefix}{files.LOG_SUFFIX}{unopened.suffix}"
        if unopened.closed:
            raise ValueError(f"{unopened.directory / name}: the segment is closed")
        directory, cache = unopened.directory, unopened.file_cache
        self._log = FileRecords(directory / name, cache=cache)
        self._offset_index = OffsetIndex(
            files.index_file(directory, self.base_offset, unopened.suffix),
            self.base_offset,
            unopened.max_index_size_bytes,
            writable=False,
            cache=cache,
            deferred=True,
        )
        self._time_index = TimeIndex(
            files.time_index_file(directory, self.base_offset, unopened.suffix),
            self.base_offset,
            unopened.max_index_size_bytes,
            writable=False,
            cache=cache,
            deferred=True,
        )
        self._unopened = None

    @property
    def directory(self) -> Path:
        return self._log_path().parent

    def _log_path(self) -> Path:
        unopened = self._unopened
        if unopened is None:
            return self._log.path
        return unopened.directory / f"{unopened.prefix}{files.LOG_SUFFIX}{unopened.suffix}"

    # The .txnindex, made on first use (txn_index): most segments never need one.
    _txn_index: TransactionIndex | None = None

    @property
    def txn_index(self) -> TransactionIndex:
        """The aborted transactions whose ABORT markers are in this segment (a file opened per
        use: it holds no descriptor)."""
        index = self._txn_index
        if index is None:
            index = self._txn_index = TransactionIndex(self.txn_index_path(), self.base_offset)
        return index

    def txn_index_path(self) -> Path:
        path = self._log_path()
        return path.with_name(path.name.replace(files.LOG_SUFFIX, files.TXN_INDEX_SUFFIX, 1))

    def close_handles(self) -> None:
        """Close file handles without writing anything (a crash, as far as the files know)."""
        self.release_held_files()
        if self._unopened is not None:
            self._unopened = self._unopened._replace(closed=True)
            return
        self._offset_index.close_without_trim()
        self._time_index.close_without_trim()
        self._log.close()

    def pin_files(self) -> int:
        """Keep the segment's three files open until :meth:`unpin_files` (an append: a
        descriptor that cannot be had fails it before anything is written, never between the
        log and its index entries); only the ``.log`` when the indexes are mapped (mapped
        before the write: OffsetIndex.reserve_next). One acquisition of the cache's lock;
        nothing without a cache (the files are open for good then). Returns the ``.log``'s
        descriptor (the native append writes to it)."""
        cache = self.file_cache
        if cache is None:
            return self._log.handle.fd  # open for the segment's life
        handles = self._handles or self._cached_handles()
        cache.acquire_all(handles)
        return handles[0].fd

    def unpin_files(self) -> None:
        cache = self.file_cache
        if cache is not None:
            cache.release_all(self._handles or self._cached_handles())

    def hold_files(self) -> int:
        """:meth:`pin_files` until :meth:`release_held_files` or the segment closes, for the
        appends to this segment while it is active (storagecore.file_cache: a held file);
        sets :attr:`held_log`. Returns the ``.log``'s descriptor, or -1 when the cache holds
        as many files as it may (the caller pins per append then)."""
        cache = self.file_cache
        if cache is None:
            handle = self.held_log = self._log.handle  # open for the segment's life
            return handle.fd
        handles = self._handles or self._cached_handles()
        if not cache.hold_all(handles):
            return -1
        self._held = handles
        self.held_log = handles[0]
        return handles[0].fd

    def release_held_files(self) -> None:
        """End :meth:`hold_files`' hold (the segment is no longer active, or closes)."""
        if self.held_log is None:
            return
        self.held_log = None
        if self.file_cache is not None:
            self.file_cache.release_held(self._held)
        self._held = ()

    def _cached_handles(self) -> tuple[CachedFile, ...]:
        handles = self._handles
        if handles is None:
            self._open_files()
            found: tuple[Handle, ...] = (self._log.handle,)
            if not MAPPED:  # mapped, index entries go to mappings, which hold no descriptor
                found += (self._offset_index.handle, self._time_index.handle)
            assert all(isinstance(h, CachedFile) for h in found), found
            handles = self._handles = cast(tuple[CachedFile, ...], found)
        return handles

    def use_file_cache(self, cache: FileCache) -> None:
        """Open this segment's files through ``cache`` from now on (a segment written outside
        it, such as the cleaner's, once swapped into a log that uses one)."""
        if self.file_cache is cache:
            return
        self.release_held_files()
        self._open_files()
        self._log.use_cache(cache)
        self._offset_index.use_cache(cache)
        self._time_index.use_cache(cache)
        self.file_cache = cache
        self._handles = None

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment from ``old_suffix`` to ``new_suffix``."""

        def renamed(path: Path) -> Path:
            name = path.name
            stem = (
                name[: len(name) - len(old_suffix)]
                if old_suffix and name.endswith(old_suffix)
                else name
            )
            return path.with_name(stem + new_suffix)

        txn = self.txn_index_path()
        self._open_files()
        self._log.rename_to(renamed(self._log.path))
        self._offset_index.rename_to(renamed(self._offset_index.path))
        self._time_index.rename_to(renamed(self._time_index.path))
        if txn.exists():
            durability.rename(txn, renamed(txn))
        if self._txn_index is not None:
            self._txn_index.path = renamed(txn)

    def delete_files(self) -> None:
        """Close and unlink every file of the segment (whatever its current suffix)."""
        txn = self.txn_index_path()
        unopened = self._unopened
        if unopened is not None:
            directory, base, suffix = unopened.directory, self.base_offset, unopened.suffix
            paths = (
                files.log_file(directory, base, suffix),
                files.index_file(directory, base, suffix),
                files.time_index_file(directory, base, suffix),
            )
        else:
            paths = (self._log.path, self._offset_index.path, self._time_index.path)
        self.close_handles()
        for path in (*paths, txn):
            path.unlink(missing_ok=True)
        self._txn_index = None  # its entries went with the file
