"""A read-only view of log dirs: the segment files of a partition dir, their index entries and
lookups, the checkpoint files and a partition's log start offset.

Shared by the tools (:mod:`storagecore.tools.dump`, :mod:`storagecore.tools.verify`) and the
Spark pipeline (:mod:`storagepipeline.logdirs`), which look at dirs that a worker may own and be
changing at the same time. Nothing here writes, creates a file, takes the ``.lock`` or maps an
index: index files are read whole, and the byte layouts come from :mod:`storagecore.index`
(one module per format). Lookups here treat an index as a hint, never as the truth: it may be
preallocated (zero entries after the real ones), damaged, or replaced while being read.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from storagecore import files
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.config import TopicPartition
from storagecore.errors import ConfigError, CorruptCheckpointError
from storagecore.index.offset_index import ENTRY as OFFSET_ENTRY
from storagecore.index.offset_index import OffsetPosition
from storagecore.index.time_index import ENTRY as TIME_ENTRY
from storagecore.index.time_index import TimestampOffset

logger = logging.getLogger(__name__)

#: The offset checkpoint files at the root of a log dir.
CHECKPOINT_FILES: Final = (
    files.RECOVERY_POINT_CHECKPOINT,
    files.LOG_START_OFFSET_CHECKPOINT,
    files.CLEANER_OFFSET_CHECKPOINT,
)


# -- a log dir -----------------------------------------------------------------------------------
def in_use(log_dir: Path) -> bool:
    """Whether another process holds the log dir's lock (read-only probe: nothing is created)."""
    try:
        fd = os.open(log_dir / files.LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock we may have taken
    return False


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """The entries of an offset checkpoint file; raises OSError or CorruptCheckpointError."""
    return OffsetCheckpointFile(path).read()


def log_start_offset(partition_dir: Path) -> int:
    """The partition's log start offset from its log dir's checkpoint (0 if absent or unreadable,
    with a warning: the caller then takes it from the segments)."""
    path = partition_dir.parent / files.LOG_START_OFFSET_CHECKPOINT
    try:
        offsets = read_checkpoint(path)
    except (OSError, CorruptCheckpointError) as exc:
        logger.warning("%s: unreadable (%s); taking log start offsets from the segments", path, exc)
        return 0
    try:
        tp = files.parse_partition_dir_name(partition_dir.name)
    except ConfigError:
        return 0
    return offsets.get(tp, 0)


# -- the segments of a partition dir -------------------------------------------------------------
def log_files(directory: Path, names: Iterable[str]) -> list[tuple[int, Path]]:
    """``(base offset, path)`` of the live ``<base>.log`` files among ``names`` (the entries of
    ``directory``), sorted by base offset."""
    return sorted(
        (files.offset_from_file_name(name), directory / name)
        for name in names
        if files.is_segment_file_name(name) and name.endswith(files.LOG_SUFFIX)
    )


def segment_bases(names: Iterable[str]) -> list[int]:
    """Sorted base offsets of the live ``<base>.log`` files among ``names``."""
    return [base for base, _ in log_files(Path(), names)]


def temporary_file_names(names: Iterable[str]) -> list[str]:
    """``.cleaned``, ``.swap``, ``.deleted`` and ``.snapshot.tmp`` files: what an interrupted
    operation leaves."""
    suffixes = (
        files.CLEANED_SUFFIX,
        files.SWAP_SUFFIX,
        files.DELETED_SUFFIX,
        files.SNAPSHOT_TMP_SUFFIX,
    )
    return [name for name in names if name.endswith(suffixes)]


def orphan_index_names(names: Iterable[str]) -> list[str]:
    """Index files (not temporary) without the ``.log`` of their segment among ``names``."""
    present = set(names)
    return [
        name
        for name in present
        if files.is_segment_file_name(name)
        and name.endswith(files.INDEX_SUFFIXES)
        and files.filename_prefix(files.offset_from_file_name(name)) + files.LOG_SUFFIX
        not in present
    ]


# -- index files ---------------------------------------------------------------------------------
def index_entries(path: Path, entry: struct.Struct) -> tuple[list[tuple[int, ...]], int]:
    """The whole entries of an index file as raw tuples (relative offsets), and how many bytes
    after them do not make a whole entry. Raises OSError (a missing file included)."""
    data = path.read_bytes()
    trailing = len(data) % entry.size
    return [tuple(e) for e in entry.iter_unpack(data[: len(data) - trailing])], trailing


def offset_index_entries(path: Path, base_offset: int) -> list[OffsetPosition]:
    """The whole entries of a ``.index`` file, with absolute offsets, as written."""
    entries, _ = index_entries(path, OFFSET_ENTRY)
    return [OffsetPosition(base_offset + relative, position) for relative, position in entries]


def time_index_entries(path: Path, base_offset: int) -> list[TimestampOffset]:
    """The whole entries of a ``.timeindex`` file, with absolute offsets, as written."""
    entries, _ = index_entries(path, TIME_ENTRY)
    return [TimestampOffset(timestamp, base_offset + relative) for timestamp, relative in entries]


def _index_path_of(log_path: Path, suffix: str) -> Path:
    return log_path.with_name(log_path.name[: -len(files.LOG_SUFFIX)] + suffix)


def index_position(log_path: Path, base_offset: int, target_offset: int, size_bytes: int) -> int:
    """A byte position at or before the batch holding ``target_offset``, from the ``.index``
    beside ``log_path`` (0 without one).

    The walk stops at the first entry that does not increase or points outside the first
    ``size_bytes`` of the log, falling back to an earlier entry or position 0.
    """
    try:
        entries, _ = index_entries(_index_path_of(log_path, files.INDEX_SUFFIX), OFFSET_ENTRY)
    except OSError:
        return 0
    position = 0
    last_relative = -1
    last_position = -1
    for relative, entry_position in entries:
        if relative <= last_relative or entry_position <= last_position:
            break
        if entry_position >= size_bytes or base_offset + relative > target_offset:
            break
        position, last_relative, last_position = entry_position, relative, entry_position
    return position


def max_timestamp_hint(log_path: Path) -> int | None:
    """The largest timestamp in a sealed segment's ``.timeindex`` (its last entry before any
    that goes back), or None without one."""
    try:
        entries, _ = index_entries(_index_path_of(log_path, files.TIME_INDEX_SUFFIX), TIME_ENTRY)
    except OSError:
        return None
    best: int | None = None
    for timestamp, _relative in entries:
        if best is not None and timestamp < best:
            break
        best = timestamp
    return best
