"""What the cleaner's map pass reads of a log, and a read-only implementation over files.

:meth:`storagecore.cleaner.Cleaner.build_offset_map` reads a log's ``tp``, its ``segments``
(each a base offset, its records and an offset index to start the walk at the first dirty
offset) and its ``log_end_offset`` (which bounds the keys a round may put): :class:`MapSource`.
A :class:`storagecore.Log` is one. :class:`FileMapSource` is another: planned segment files
opened read-only, each bounded to its planned bytes, for a process that cleans a partition it
does not own (the Spark ``compact`` job's executors, :mod:`storagepipeline.partition_clean`).

Must not write, rename or delete anything: the files belong to the log's owner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from storagecore.cleaner.regions import SegmentSource
from storagecore.config import TopicPartition
from storagecore.index.offset_index import OffsetPosition
from storagecore.log_dir_view import index_position
from storagecore.records.file_records import FileRecords


class OffsetLookup(Protocol):
    """An offset index, as far as the map pass uses one."""

    def lookup(self, offset: int) -> OffsetPosition:
        """A position at or before the batch that holds ``offset``."""
        ...


class MappedSegment(SegmentSource, Protocol):
    """A segment as the map pass reads it: its records and where to start in them."""

    @property
    def offset_index(self) -> OffsetLookup: ...


class MapSource(Protocol):
    """A log as the map pass reads it."""

    @property
    def tp(self) -> TopicPartition: ...

    @property
    def segments(self) -> Sequence[MappedSegment]: ...

    @property
    def log_end_offset(self) -> int: ...


class FileSegment:
    """One segment file opened read-only, bounded to ``size_bytes`` (appends after planning
    are not seen); its offset index is read whole per lookup, as a hint
    (:func:`storagecore.log_dir_view.index_position`)."""

    def __init__(self, path: Path, base_offset: int, size_bytes: int) -> None:
        self._path = path
        self._base_offset = base_offset
        self._log = FileRecords(path, create=False, writable=False)
        assert self._log.size_bytes >= size_bytes, (path, size_bytes, self._log.size_bytes)
        self._log.size_bytes = size_bytes

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def log(self) -> FileRecords:
        return self._log

    @property
    def offset_index(self) -> FileSegment:
        return self

    def lookup(self, offset: int) -> OffsetPosition:
        position = index_position(self._path, self._base_offset, offset, self._log.size_bytes)
        return OffsetPosition(offset, position)

    def close(self) -> None:
        self._log.close()


@dataclasses.dataclass(frozen=True, slots=True)
class FileMapSource:
    """Planned segment files of one partition, as a :class:`MapSource`."""

    tp: TopicPartition
    segments: Sequence[FileSegment]
    #: The planned first uncleanable offset (a segment base, where the map pass stops): it
    #: bounds the keys a round may put, as a log's end does.
    log_end_offset: int

    @classmethod
    def open(
        cls,
        tp: TopicPartition,
        segments: Sequence[tuple[Path, int, int]],
        log_end_offset: int,
    ) -> FileMapSource:
        """``segments``: (path, base offset, planned bytes) of each, in offset order."""
        opened: list[FileSegment] = []
        try:
            for path, base_offset, size_bytes in segments:
                opened.append(FileSegment(path, base_offset, size_bytes))
        except BaseException:
            for segment in opened:
                segment.close()
            raise
        return cls(tp, tuple(opened), log_end_offset)

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
