"""A ``.log`` file: a concatenation of record batches, appended and read by byte position.

Positional I/O (``pread``/``pwrite``) on one file descriptor: appends go to the logical end, reads
never move a shared file pointer, so readers and the appender do not interfere. The batch scan
implements Kafka's ``FileLogInputStream`` end-of-data rules: fewer than 17 bytes left, or a
declared size running past the end, is the end of the data (a torn tail); a declared length below
14 bytes is corruption.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final, NamedTuple

from storagecore import durability
from storagecore.errors import CorruptRecordError
from storagecore.file_cache import FileCache, Handle, OpenFile, open_handle
from storagecore.records import layout, legacy, producer_walk
from storagecore.records.batch import RecordBatch

logger = logging.getLogger(__name__)

_LENGTH: Final = struct.Struct(">i")
_READ_CHUNK_BYTES: Final = 1 << 20
_FIRST_HEADER_CHUNK_BYTES: Final = 8 << 10
_TIMESTAMP: Final = struct.Struct(">q")
_POSITION: Final = struct.Struct("=q")
_INT64: Final = struct.Struct(">q")


def next_offset_within(data: bytes, data_position: int, walk_from: int, next_offset: int) -> int:
    """The offset after the last v2 batch that ends within ``data`` (the file's bytes from
    ``data_position``), walking the headers in memory from file position ``walk_from`` (a batch
    start inside ``data``); ``next_offset`` when none is complete. -1 when the walk meets a
    legacy (v0/v1) entry: the caller walks the file instead. The same framing rules as
    :meth:`FileRecords.header_at`, without a read per header."""
    end = len(data)
    at = walk_from - data_position
    while end - at >= layout.HEADER_SIZE_UP_TO_MAGIC:
        if data[at + layout.MAGIC_OFFSET] in _LEGACY_MAGICS:
            return -1  # (a legacy entry may be shorter than a v2 header: looked at first)
        if end - at < layout.RECORD_BATCH_OVERHEAD:
            break
        base_offset, length = layout.LOG_HEADER_PREFIX.unpack_from(data, at)
        size = length + layout.LOG_OVERHEAD
        if size < layout.RECORD_BATCH_OVERHEAD or at + size > end:
            break
        (last_delta,) = _LENGTH.unpack_from(data, at + layout.LAST_OFFSET_DELTA_OFFSET)
        next_offset = base_offset + last_delta + 1
        at += size
    return next_offset


class BatchHeader(NamedTuple):
    """Where a batch sits in a file and the header fields the log layer needs."""

    position: int
    base_offset: int
    last_offset: int
    size_bytes: int
    max_timestamp: int
    magic: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


_LEGACY_MAGICS: Final = frozenset((legacy.MAGIC_V0, legacy.MAGIC_V1))


def _legacy_header(chunk: bytes, rel: int, position: int, offset: int, size: int) -> BatchHeader:
    """A v0/v1 entry's header: its offset is its last (a wrapper's last inner message's), its
    timestamp (v1) the max; the first inner offset would need the payload decompressed, so
    the header walk reports the last offset as the base too (Kafka's shallow walks do the
    same: they ask a legacy entry only for its last offset)."""
    timestamp = layout.NO_TIMESTAMP
    magic = chunk[rel + layout.MAGIC_OFFSET]
    if magic == legacy.MAGIC_V1 and size >= legacy.KEY_LENGTH_OFFSET_V1:
        (timestamp,) = _TIMESTAMP.unpack_from(chunk, rel + legacy.TIMESTAMP_OFFSET)
    return BatchHeader(position, offset, offset, size, timestamp, magic)


class FileRegion:
    """Bytes ``[position, position + size_bytes)`` of a ``.log`` file, for a zero-copy send.

    Owns a duplicate of the file's descriptor: the bytes stay readable after the segment is
    renamed, replaced by the cleaner or deleted (Kafka's ``FileRecords.slice`` + ``sendfile``).
    The region's bytes are below the log end when it is cut, so nothing rewrites them. The
    holder sends it (``os.sendfile`` on ``fd``) or reads it, then calls :meth:`close`.
    """

    __slots__ = ("fd", "position", "size_bytes")

    def __init__(self, fd: int, position: int, size_bytes: int) -> None:
        assert position >= 0 and size_bytes > 0, (position, size_bytes)
        self.fd = os.dup(fd)
        self.position = position
        self.size_bytes = size_bytes

    def __len__(self) -> int:
        return self.size_bytes

    def read(self) -> bytes:
        """The region's bytes (the copy path: TLS connections, tests)."""
        assert self.fd >= 0, "region already closed"
        chunks: list[bytes] = []
        done = 0
        while done < self.size_bytes:
            chunk = os.pread(self.fd, self.size_bytes - done, self.position + done)
            if not chunk:
                raise OSError(f"file region ended {self.size_bytes - done} bytes short")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:  # a backstop: holders close regions explicitly
        self.close()

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, size={self.size_bytes})"


class FileRecords:
    """One ``.log`` file; ``size_bytes`` is its logical size (appends go there).

    Its descriptor is a :class:`~storagecore.file_cache.Handle`: opened once for the object's
    life, or, given a :class:`~storagecore.file_cache.FileCache`, opened on use and closed by
    the cache when idle (every system call below pins it for its duration)."""

    # The dict and weak references the class had without __slots__, and the native
    # append's slot (storagecore/records/_slots.h).
    __slots__ = ("__dict__", "__weakref__", "size_bytes")

    def __init__(
        self,
        path: Path,
        *,
        create: bool = True,
        writable: bool = True,
        cache: FileCache | None = None,
    ) -> None:
        # Read-only opens (writable=False: readers outside the owning process, such as the
        # Spark pipeline) never create, extend or truncate the file.
        flags = os.O_RDWR if writable else os.O_RDONLY
        self.path = path
        if cache is None:
            self._handle: Handle = open_handle(path, flags, None, create=create and writable)
            self.size_bytes = os.fstat(self._handle.fd).st_size
            return
        try:
            self.size_bytes = os.stat(path).st_size
            exists = True
        except FileNotFoundError:
            if not (create and writable):
                raise
            exists = False
        self._handle = open_handle(path, flags, cache, create=not exists)
        if not exists:
            self.size_bytes = 0

    @property
    def fd(self) -> int:
        """The descriptor of a file opened without a cache (with one: :meth:`pinned`)."""
        assert isinstance(self._handle, OpenFile), f"{self.path}: cached, use pinned()"
        return self._handle.fd

    @property
    def handle(self) -> Handle:
        return self._handle

    def pinned_fd(self) -> int:
        """The descriptor of a file its caller pinned already (LogSegment.pin_files)."""
        handle = self._handle
        assert handle.fd >= 0 and (isinstance(handle, OpenFile) or handle.users > 0), handle
        return handle.fd

    def acquire(self) -> int:
        """The open descriptor, pinned until :meth:`release` (the hot path's :meth:`pinned`)."""
        return self._handle.acquire()

    def release(self) -> None:
        self._handle.release()

    def pinned(self) -> contextlib.AbstractContextManager[int]:
        """The open descriptor, kept open for the ``with`` block (a native call, an mmap)."""
        return self._handle.pinned()

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end; return the position it starts at."""
        position = self.size_bytes
        view = memoryview(data)
        offset = position
        fd = self._handle.acquire()
        try:
            while view:
                written = os.pwrite(fd, view, offset)
                view = view[written:]
                offset += written
        except OSError:
            # A short write (a full filesystem) leaves no partial batch behind: the file ends
            # at the last complete append again. Shrinking needs no space.
            if offset > position:
                os.ftruncate(fd, position)
            raise
        finally:
            self._handle.release()
        self.size_bytes = offset
        return position

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (short only at the end of the file)."""
        size = max(0, min(size, self.size_bytes - position))
        if size == 0:
            return b""
        fd = self._handle.acquire()
        try:
            data = os.pread(fd, size, position)
            while len(data) < size:  # pread may return short on some filesystems
                more = os.pread(fd, size - len(data), position + len(data))
                if not more:
                    break
                data += more
        finally:
            self._handle.release()
        return data

    def region(self, position: int, size: int) -> FileRegion:
        """``read(position, size)`` as a :class:`FileRegion` (no bytes copied here)."""
        size = max(0, min(size, self.size_bytes - position))
        with self._handle.pinned() as fd:
            return FileRegion(fd, position, size)

    def flush(self) -> None:
        with self._handle.pinned() as fd:
            durability.fsync_fd(fd)

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; return the number of bytes removed."""
        if size > self.size_bytes or size < 0:
            raise AssertionError(f"truncate {self.path} to {size} outside [0, {self.size_bytes}]")
        removed = self.size_bytes - size
        with self._handle.pinned() as fd:
            os.ftruncate(fd, size)
        self.size_bytes = size
        return removed

    def close(self) -> None:
        """Close the descriptor; best effort, because a failing disk may refuse even that."""
        self._handle.close()

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def rename_to(self, target: Path) -> None:
        durability.rename(self.path, target)
        self.path = target
        self._handle.path = target

    def mtime_ms(self) -> int:
        return int(os.stat(self.path).st_mtime * 1000)

    def inode(self) -> int:
        """The inode of the open file (not of whatever the path names now)."""
        with self._handle.pinned() as fd:
            return os.fstat(fd).st_ino

    def use_cache(self, cache: FileCache) -> None:
        """Open through ``cache`` from now on (a segment written outside the cache, such as
        the cleaner's, joining a log that uses one)."""
        if isinstance(self._handle, OpenFile) and not self._handle.closed:
            self._handle.close()
            self._handle = cache.file(self.path, os.O_RDWR)

    # -- scans ---------------------------------------------------------------------------------
    def header_at(self, position: int) -> BatchHeader | None:
        """The header of a complete, plausibly framed batch at ``position``, else None."""
        if self.size_bytes - position < legacy.ENTRY_HEADER.size:
            return None
        fd = self._handle.acquire()
        try:
            data = os.pread(fd, layout.RECORD_BATCH_OVERHEAD, position)
        finally:
            self._handle.release()
        if len(data) < layout.RECORD_BATCH_OVERHEAD and data[layout.MAGIC_OFFSET] not in (
            _LEGACY_MAGICS
        ):
            return None
        base_offset, length = layout.LOG_HEADER_PREFIX.unpack_from(data, 0)
        size = length + layout.LOG_OVERHEAD
        if data[layout.MAGIC_OFFSET] in _LEGACY_MAGICS:
            if length < layout.MIN_DECLARED_BATCH_LENGTH or position + size > self.size_bytes:
                return None
            return _legacy_header(data, 0, position, base_offset, size)
        if size < layout.RECORD_BATCH_OVERHEAD or position + size > self.size_bytes:
            return None
        (last_delta,) = _LENGTH.unpack_from(data, layout.LAST_OFFSET_DELTA_OFFSET)
        (max_ts,) = _TIMESTAMP.unpack_from(data, layout.MAX_TIMESTAMP_OFFSET)
        magic = data[layout.MAGIC_OFFSET]
        return BatchHeader(position, base_offset, base_offset + last_delta, size, max_ts, magic)

    def batch_headers(self, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches in ``[start, end)``, stopping at a torn tail.

        Raises :class:`CorruptRecordError` on a declared length below 14 bytes (Kafka treats a
        zero-filled tail this way). Contents are not CRC-checked here; see :meth:`batches`.
        Reads in chunks that start small (a lookup usually needs one header) and double.
        """
        for header, _chunk, _rel in self._walk_headers(start, end):
            yield header

    def header_views(
        self, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Like :meth:`batch_headers`, with a view of each batch's whole 61-byte v2 header
        (for walks that need producer fields without reading the records)."""
        for header, chunk, rel in self._walk_headers(start, end):
            if header.size_bytes < layout.RECORD_BATCH_OVERHEAD:
                raise CorruptRecordError(
                    f"{self.path}: batch at position {header.position} is {header.size_bytes} "
                    f"bytes, smaller than the {layout.RECORD_BATCH_OVERHEAD}-byte header"
                )
            yield header, memoryview(chunk)[rel : rel + layout.RECORD_BATCH_OVERHEAD]

    def producer_batches(self, start: int = 0) -> Iterator[RecordBatch]:
        """The batches from ``start`` that carry a producer id, in file order: a copy of the
        61-byte header of each data batch, control batches whole and validated (their record
        says COMMIT or ABORT). Framing and its errors are :meth:`header_views`'; the others
        are skipped in one native call per chunk (:mod:`storagecore.records.producer_walk`)."""
        end = self.size_bytes
        walk_file = producer_walk.producer_batches_file
        if walk_file is not None:
            # One native call that reads only the headers of large batches (a chunked read
            # would copy every record of the log to look at its headers).
            with self._handle.pinned() as fd:
                consumed, _next, found, headers, problem, value = walk_file(fd, start, end)
            for index, (position,) in enumerate(_POSITION.iter_unpack(found)):
                yield self._producer_batch(headers, index * layout.RECORD_BATCH_OVERHEAD, position)
            self._raise_walk_problem(problem, consumed, value)
            return
        position = start
        while end - position >= layout.HEADER_SIZE_UP_TO_MAGIC:
            chunk = self.read(position, min(_READ_CHUNK_BYTES, end - position))
            consumed, _next, found, problem, value = producer_walk.producer_batches(chunk)
            for (rel,) in _POSITION.iter_unpack(found):
                yield self._producer_batch(chunk, rel, position + rel)
            position += consumed
            self._raise_walk_problem(problem, position, value)
            if consumed:
                continue  # the next chunk starts at the batch this one cut
            # A batch larger than a chunk, or a torn tail: its header decides.
            header = next(self.batch_headers(position, end), None)
            if header is None:
                return
            if header.magic == layout.CURRENT_MAGIC:
                if header.size_bytes < layout.RECORD_BATCH_OVERHEAD:
                    raise CorruptRecordError(
                        f"{self.path}: batch at position {position} is {header.size_bytes} "
                        f"bytes, smaller than the {layout.RECORD_BATCH_OVERHEAD}-byte header"
                    )
                head = self.read(position, layout.RECORD_BATCH_OVERHEAD)
                if _INT64.unpack_from(head, layout.PRODUCER_ID_OFFSET)[0] != layout.NO_PRODUCER_ID:
                    yield self._producer_batch(head, 0, position)
            position += header.size_bytes

    def _raise_walk_problem(self, problem: int, position: int, value: int) -> None:
        """The reference's error for a producer walk that stopped at ``position``."""
        if problem == producer_walk.PROBLEM_SHORT_LENGTH:
            raise CorruptRecordError(
                f"{self.path}: batch at position {position} declares length {value} "
                f"(minimum {layout.MIN_DECLARED_BATCH_LENGTH})"
            )
        if problem == producer_walk.PROBLEM_SHORT_V2:
            raise CorruptRecordError(
                f"{self.path}: batch at position {position} is {value} bytes, smaller "
                f"than the {layout.RECORD_BATCH_OVERHEAD}-byte header"
            )

    def _producer_batch(self, chunk: bytes, rel: int, position: int) -> RecordBatch:
        header = chunk[rel : rel + layout.RECORD_BATCH_OVERHEAD]
        if not header[layout.ATTRIBUTES_OFFSET + 1] & layout.CONTROL_FLAG_MASK:
            return RecordBatch(header)
        (length,) = _LENGTH.unpack_from(header, layout.LENGTH_OFFSET)
        batch = RecordBatch(self.read(position, length + layout.LOG_OVERHEAD))
        batch.validate()
        return batch

    def _walk_headers(
        self, start: int, end: int | None
    ) -> Iterator[tuple[BatchHeader, bytes, int]]:
        end = self.size_bytes if end is None else min(end, self.size_bytes)
        position = start
        chunk = b""
        chunk_start = position
        chunk_size = _FIRST_HEADER_CHUNK_BYTES
        while end - position >= layout.HEADER_SIZE_UP_TO_MAGIC:
            rel = position - chunk_start
            if rel + layout.RECORD_BATCH_OVERHEAD > len(chunk):
                chunk = self.read(position, min(chunk_size, end - position))
                chunk_start = position
                chunk_size = min(chunk_size * 2, _READ_CHUNK_BYTES)
                rel = 0
            if len(chunk) - rel < layout.HEADER_SIZE_UP_TO_MAGIC:
                return
            base_offset, length = layout.LOG_HEADER_PREFIX.unpack_from(chunk, rel)
            if length < layout.MIN_DECLARED_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"{self.path}: batch at position {position} declares length {length} "
                    f"(minimum {layout.MIN_DECLARED_BATCH_LENGTH})"
                )
            size = length + layout.LOG_OVERHEAD
            if position + size > end:
                return  # torn tail: the declared size runs past the end
            magic = chunk[rel + layout.MAGIC_OFFSET]
            if magic in _LEGACY_MAGICS:
                yield _legacy_header(chunk, rel, position, base_offset, size), chunk, rel
            elif (
                size < layout.RECORD_BATCH_OVERHEAD
                or len(chunk) - rel < layout.RECORD_BATCH_OVERHEAD
            ):
                # Too short to hold a v2 header: report what we have; validation rejects it.
                short = BatchHeader(
                    position, base_offset, base_offset, size, layout.NO_TIMESTAMP, magic
                )
                yield short, chunk, rel
            else:
                (last_delta,) = _LENGTH.unpack_from(chunk, rel + layout.LAST_OFFSET_DELTA_OFFSET)
                (max_ts,) = _TIMESTAMP.unpack_from(chunk, rel + layout.MAX_TIMESTAMP_OFFSET)
                last = base_offset + last_delta
                yield BatchHeader(position, base_offset, last, size, max_ts, magic), chunk, rel
            position += size

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, RecordBatch]]:
        """Complete batches in ``[start, end)`` as views, read in large chunks (not validated)."""
        # One pass over large chunks, a batch viewed in place (only one running past its
        # chunk's end is read on its own). The framing checks are _walk_headers'; this loop
        # is its own because every read, recovery and cleaning pass runs it per batch.
        end = self.size_bytes if end is None else min(end, self.size_bytes)
        position = start
        chunk = b""
        view = memoryview(chunk)
        chunk_start = position
        while end - position >= layout.HEADER_SIZE_UP_TO_MAGIC:
            rel = position - chunk_start
            if rel + layout.HEADER_SIZE_UP_TO_MAGIC > len(chunk):
                chunk = self.read(position, min(_READ_CHUNK_BYTES, end - position))
                view = memoryview(chunk)
                chunk_start = position
                rel = 0
                if len(chunk) < layout.HEADER_SIZE_UP_TO_MAGIC:
                    return
            _base_offset, length = layout.LOG_HEADER_PREFIX.unpack_from(chunk, rel)
            if length < layout.MIN_DECLARED_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"{self.path}: batch at position {position} declares length {length} "
                    f"(minimum {layout.MIN_DECLARED_BATCH_LENGTH})"
                )
            size = length + layout.LOG_OVERHEAD
            if position + size > end:
                return  # torn tail: the declared size runs past the end
            if chunk[rel + layout.MAGIC_OFFSET] in _LEGACY_MAGICS:
                # A v0/v1 message (a plain one or a compressed wrapper): its own view.
                make: type[RecordBatch] = legacy.LegacyRecordBatch
            elif size < layout.RECORD_BATCH_OVERHEAD:
                raise CorruptRecordError(
                    f"{self.path}: batch at position {position} is {size} "
                    f"bytes, smaller than the {layout.RECORD_BATCH_OVERHEAD}-byte header"
                )
            else:
                make = RecordBatch
            if rel + size <= len(chunk):
                yield position, make(view[rel : rel + size])
            else:
                data = self.read(position, size)
                if len(data) < size:
                    return  # the file shrank under us: a torn tail
                yield position, make(data)
            position += size
