"""Read-only views of the log dirs on the volumes: which partitions exist, their segments, offsets.

Called on the Spark driver to plan a read or a job, and on executors to read a planned segment.
Nothing here writes to a data dir, takes its ``.lock`` or opens an index for writing: a worker
may own the dir and be appending, cleaning and deleting segments while we look.

A *snapshot* of a partition is the list of its ``<base>.log`` files, each pinned by its device and
inode and by its size at planning time, plus the offset range to deliver. A segment that the
worker replaces (cleaning) or deletes (retention) keeps its inode under the name
``<base>.log.deleted`` until ``file.delete.delay.ms`` passes, so a read that starts within that
delay sees exactly the planned bytes. To hold them for longer, a :class:`Pinner` hard-links
each planned segment into a *pin set* of its data dir (:mod:`storagecore.pins`; the only thing
a reader ever writes into a data dir), kept until the reader releases it or its lease expires.
Without a pin (a read-only mount, or pinning off) and after the ``.deleted`` name is gone,
:mod:`storagepipeline.reading` falls back to the segments now covering the planned offset range
(a cleaned range: same offsets, fewer records; a range removed by retention: data loss, an error
unless ``failOnDataLoss=false``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from storagecore import TopicPartition, pins
from storagecore import files as core_files
from storagecore.errors import ConfigError, CorruptRecordError
from storagecore.log_dir_view import index_position, log_files
from storagecore.log_dir_view import log_start_offset as read_log_start_offset
from storagecore.records.file_records import FileRecords

logger = logging.getLogger(__name__)

#: How long a planner waits for a worker's segment swap (``.swap`` files present) to finish.
_SWAP_WAIT_S: Final = 5.0
_SWAP_POLL_S: Final = 0.02
#: How many times a planner lists a partition whose segments change under it.
_SNAPSHOT_ATTEMPTS: Final = 50


class PipelineError(Exception):
    """Bad input to a pipeline read, write or job: names the option, topic, file or offset."""


class DataLossError(PipelineError):
    """Planned records are gone (retention ran, or offsets below the log start were asked for)."""


class CorruptDataError(PipelineError):
    """A batch failed its CRC or framing check; the message names the file and position."""


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentRef:
    """One ``.log`` file as planned: where it is, which inode, how much of it, which offsets."""

    path: str
    base_offset: int
    device: int
    inode: int
    #: Bytes of the file at planning time; nothing past it is read (later appends are not
    #: part of the snapshot).
    size_bytes: int
    #: Offsets ``[start_offset, end_offset)`` of this segment belong to the read.
    start_offset: int
    end_offset: int
    #: Whether this was the partition's active (last) segment when planned.
    active: bool
    #: A hard link to the same inode in a reader's pin set (None: not pinned).
    pin_path: str | None = None

    @property
    def read_path(self) -> Path:
        """Where the planned bytes are read: the pin if there is one, else the live name."""
        return Path(self.pin_path or self.path)


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """A partition's segments and offsets as seen at planning time."""

    topic: str
    partition: int
    directory: str
    log_start_offset: int
    log_end_offset: int
    segments: tuple[SegmentRef, ...]

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class _VanishedError(Exception):
    """A listed segment's inode left its names before it could be pinned: list again."""


class Pinner:
    """Pins planned segments into one pin set per data dir (created on first use).

    ``lease_ms`` bounds how long a set outlives a reader that never releases it (a data source
    read has no end-of-job hook); 0 turns pinning off. ``frozen`` are pin sets a job made
    earlier (option ``pinSets``): a partition found in one is planned from the set's links,
    exactly as the job saw it, instead of from the live directory. A data dir that cannot hold
    links (read-only mount, no permission) is read unpinned, with one warning.
    """

    def __init__(self, lease_ms: int, frozen: Sequence[pins.PinSet] = ()) -> None:
        assert lease_ms >= 0, f"negative pin lease {lease_ms}"
        self.lease_ms = lease_ms
        self.frozen = {pin_set.data_dir.resolve(): pin_set for pin_set in frozen}
        self.sets: dict[Path, pins.PinSet] = {}
        self._unpinnable: set[Path] = set()

    def view_of(self, directory: Path) -> Path | None:
        """The frozen listing of a partition directory, if a job pinned it."""
        pin_set = self.frozen.get(directory.parent.resolve())
        if pin_set is None:
            return None
        view = pin_set.path / directory.name
        return view if view.is_dir() else None

    def pin(self, tp: TopicPartition, log_path: Path, inode: int) -> str | None:
        """The pinned path of a listed segment, or None when this data dir is not pinned."""
        data_dir = log_path.parent.parent.resolve()
        if self.lease_ms == 0 or data_dir in self._unpinnable:
            return None
        try:
            pin_set = self.sets.get(data_dir)
            if pin_set is None:
                now_ms = int(time.time() * 1000)
                pins.sweep_expired(data_dir, now_ms)
                pin_set = self.sets[data_dir] = pins.create_pin_set(
                    data_dir, now_ms + self.lease_ms
                )
            pinned = pins.pin_segment(pin_set, tp, log_path, inode)
        except OSError as exc:
            if exc.errno not in pins.UNPINNABLE_ERRNOS:
                raise
            logger.warning(
                "%s cannot hold read pins (%s): reading unpinned, exact only within "
                "file.delete.delay.ms of planning",
                data_dir,
                exc,
            )
            self._unpinnable.add(data_dir)
            unused = self.sets.pop(data_dir, None)
            if unused is not None:
                pins.release(unused)
            return None
        if pinned is None:
            raise _VanishedError(log_path)
        return str(pinned)

    def forget(self, directory: Path) -> None:
        """Drop a partition's links before it is listed again (an attempt that raced the
        worker may have linked segments that are no longer part of the partition)."""
        pin_set = self.sets.get(directory.parent.resolve())
        if pin_set is not None:
            shutil.rmtree(pin_set.path / directory.name, ignore_errors=True)

    def record_log_start(self, directory: Path, log_start: int) -> None:
        """Keep the partition's log start with its pins (a later read planned from them
        starts where this snapshot started)."""
        pin_set = self.sets.get(directory.parent.resolve())
        view = pin_set.path / directory.name if pin_set is not None else None
        if view is not None and view.is_dir():
            (view / _PINNED_LOG_START).write_text(f"{log_start}\n")

    def option_value(self) -> str:
        """The ``pinSets`` option that hands these sets to a data source read."""
        return ",".join(str(pin_set.path) for pin_set in self.sets.values())

    def release(self) -> None:
        for pin_set in self.sets.values():
            pins.release(pin_set)
        self.sets.clear()


# -- partitions ----------------------------------------------------------------------------------
def partition_dirs(data_dirs: Sequence[str]) -> dict[TopicPartition, Path]:
    """Every ``<topic>-<partition>`` directory in the data dirs (internal ones included).

    A partition present in two data dirs is an error that names both (Kafka refuses to start
    on that too).
    """
    found: dict[TopicPartition, Path] = {}
    for data_dir in data_dirs:
        root = Path(data_dir)
        if not root.is_dir():
            raise PipelineError(f"data dir {root} does not exist or is not a directory")
        for child in sorted(root.iterdir()):
            if not child.is_dir() or core_files.is_delete_dir_name(child.name):
                continue
            if child.name.endswith((core_files.FUTURE_DIR_SUFFIX, core_files.STRAY_DIR_SUFFIX)):
                continue
            try:
                tp = core_files.parse_partition_dir_name(child.name)
            except ConfigError:
                continue  # not a partition (for instance the pipeline's own staging dir)
            if tp in found:
                raise PipelineError(
                    f"partition {tp} is present in two data dirs: {found[tp]} and {child}"
                )
            found[tp] = child
    return found


def select_partitions(
    available: dict[TopicPartition, Path],
    *,
    topics: Sequence[str] = (),
    pattern: str | None = None,
) -> dict[TopicPartition, Path]:
    """The partitions of the named topics (each must exist) or of the topics matching
    ``pattern`` (a full-match regular expression, as Kafka's ``subscribePattern``)."""
    names = {tp.topic for tp in available}
    wanted: set[str] = set()
    for topic in topics:
        if topic not in names:
            raise PipelineError(
                f"unknown topic {topic!r}: no partition directory {topic}-<n> in the data dirs "
                f"(topics present: {', '.join(sorted(names)) or 'none'})"
            )
        wanted.add(topic)
    if pattern is not None:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise PipelineError(f"option topicPattern {pattern!r} is not a regex: {exc}") from exc
        wanted.update(name for name in names if regex.fullmatch(name))
    return {tp: path for tp, path in sorted(available.items()) if tp.topic in wanted}


# -- segments ------------------------------------------------------------------------------------
def _list_logs(directory: Path) -> list[tuple[int, Path]]:
    """``(base, path)`` of the live ``.log`` files, after any swap in progress completes."""
    deadline = time.monotonic() + _SWAP_WAIT_S
    while True:
        names = os.listdir(directory)
        swapping = any(name.endswith(core_files.SWAP_SUFFIX) for name in names)
        if not swapping or time.monotonic() > deadline:
            if swapping:
                logger.warning(
                    "%s: .swap files present for %.1f s; planning without them",
                    directory,
                    _SWAP_WAIT_S,
                )
            return log_files(directory, names)
        # The worker is between steps 1 and 4 of its swap (milliseconds): the replaced range
        # is briefly covered only by .swap files. Wait for the final names.
        time.sleep(_SWAP_POLL_S)


_PINNED_LOG_START: Final = "log-start-offset"


def _read_pinned_log_start(view: Path, default: int) -> int:
    try:
        return int((view / _PINNED_LOG_START).read_text())
    except (OSError, ValueError):
        return default


def open_pinned(ref: SegmentRef) -> FileRecords | None:
    """The planned file, read-only: its pin, its name or its ``.deleted`` name; None if gone."""
    candidates = (ref.path, ref.path + core_files.DELETED_SUFFIX)
    for path in (ref.pin_path, *candidates) if ref.pin_path else candidates:
        try:
            records = FileRecords(Path(path), create=False, writable=False)
        except FileNotFoundError:
            continue
        stat = os.fstat(records.fd)
        if (stat.st_dev, stat.st_ino) == (ref.device, ref.inode):
            records.size_bytes = min(records.size_bytes, ref.size_bytes)
            return records
        records.close()
    return None


def _end_offset(records: FileRecords, base_offset: int) -> int:
    """The offset after the last complete batch of an open file (its base offset if empty)."""
    position = index_position(records.path, base_offset, 2**63 - 1, records.size_bytes)
    end = base_offset
    try:
        for header in records.batch_headers(position):
            end = header.next_offset
    except CorruptRecordError as exc:
        logger.warning("%s: %s; the planned end stops before it", records.path, exc)
    return end


def snapshot_partition(
    tp: TopicPartition, directory: Path, pinner: Pinner | None = None
) -> PartitionSnapshot:
    """Pin the partition's current segments (see the module docstring).

    A listed file that is gone when opened or linked means the worker swapped or deleted
    segments between the listing and the open (a cleaned group keeps its first segment's name,
    so the other names vanish): the snapshot is then taken again from a fresh listing.
    """
    for _attempt in range(_SNAPSHOT_ATTEMPTS):
        refs = _pin(tp, directory, pinner)
        if refs is not None:
            break
        time.sleep(_SWAP_POLL_S)
    else:
        raise PipelineError(
            f"{directory}: segments kept changing while being listed "
            f"({_SNAPSHOT_ATTEMPTS} attempts); retry the read"
        )
    log_end = refs[-1].end_offset if refs else 0
    first_base = refs[0].base_offset if refs else 0
    view = pinner.view_of(directory) if pinner is not None else None
    if view is not None:
        # Planned from a job's pins: the log start as the job saw it, not as it is now.
        log_start = _read_pinned_log_start(view, first_base)
    else:
        log_start = min(max(read_log_start_offset(directory), first_base), log_end)
        if pinner is not None:
            pinner.record_log_start(directory, log_start)
    return PartitionSnapshot(
        topic=tp.topic,
        partition=tp.partition,
        directory=str(directory),
        log_start_offset=log_start,
        log_end_offset=log_end,
        segments=tuple(refs),
    )


def _pin(tp: TopicPartition, directory: Path, pinner: Pinner | None) -> list[SegmentRef] | None:
    """Refs of every listed segment, or None when one vanished before it was opened/pinned."""
    view = pinner.view_of(directory) if pinner is not None else None
    if pinner is not None and view is None:
        pinner.forget(directory)
    logs = _list_logs(view or directory)
    refs: list[SegmentRef] = []
    for i, (base, path) in enumerate(logs):
        try:
            records = FileRecords(path, create=False, writable=False)
        except FileNotFoundError:
            if view is not None:
                raise PipelineError(f"pinned segment {path} was removed while planning") from None
            return None
        try:
            stat = os.fstat(records.fd)
            active = i == len(logs) - 1
            end = _end_offset(records, base) if active else logs[i + 1][0]
            if view is not None:
                pin_path: str | None = str(path)
            elif pinner is not None:
                try:
                    pin_path = pinner.pin(tp, path, stat.st_ino)
                except _VanishedError:
                    return None
            else:
                pin_path = None
            refs.append(
                SegmentRef(
                    path=str(directory / path.name),
                    base_offset=base,
                    device=stat.st_dev,
                    inode=stat.st_ino,
                    size_bytes=records.size_bytes,
                    start_offset=base,
                    end_offset=end,
                    active=active,
                    pin_path=pin_path,
                )
            )
        finally:
            records.close()
    return refs


def clip(snapshot: PartitionSnapshot, start: int, end: int) -> list[SegmentRef]:
    """The segment refs holding offsets ``[start, end)``, each narrowed to that range."""
    clipped: list[SegmentRef] = []
    for ref in snapshot.segments:
        low, high = max(ref.start_offset, start), min(ref.end_offset, end)
        if low < high:
            clipped.append(dataclasses.replace(ref, start_offset=low, end_offset=high))
    return clipped


def current_refs(directory: Path, start: int, end: int) -> Iterator[SegmentRef]:
    """Fallback for a pinned segment that is gone: the segments covering ``[start, end)`` now."""
    tp = core_files.parse_partition_dir_name(directory.name)
    yield from clip(snapshot_partition(tp, directory), start, end)
