"""Records of planned segments, CRC-checked, as the executors' read tasks see them.

Called by the data source's ``read()`` and by the jobs. Every batch is validated (sizes, magic,
CRC-32C) before a record of it is delivered. A corrupt batch raises :class:`CorruptDataError`
naming the file and position, or with ``fail_on_corruption=False`` is skipped, logged and
counted in :class:`ReadCounters` (a batch whose length field is broken ends the segment: the
bytes after it cannot be framed). Control batches (transaction markers) are never delivered, as
with Kafka consumers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storagecore import Record, RecordBatch, durability
from storagecore.errors import CorruptRecordError
from storagecore.log_dir_view import index_position
from storagecore.records.file_records import FileRecords
from storagepipeline.logdirs import (
    CorruptDataError,
    DataLossError,
    PipelineError,
    SegmentRef,
    current_refs,
    open_pinned,
)

logger = logging.getLogger(__name__)

#: How many times a fallback read lists the successors of a replaced segment again.
_FALLBACK_ATTEMPTS = 50


@dataclasses.dataclass(slots=True)
class ReadCounters:
    """What a read skipped or fell back on (reported by the jobs; logged by the data source)."""

    corrupt_batches: int = 0
    #: Planned segments replaced after ``file.delete.delay.ms`` and read from their successors.
    fallbacks: int = 0
    #: Offsets planned but removed by retention before they were read (failOnDataLoss=false).
    lost_offsets: int = 0
    #: What was skipped, one message each (file, position, reason), the first
    #: :data:`SKIPPED_KEPT` of them.
    skipped: list[str] = dataclasses.field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.skipped) < SKIPPED_KEPT:
            self.skipped.append(message)

    @property
    def anything(self) -> bool:
        return bool(self.corrupt_batches or self.fallbacks or self.lost_offsets)


#: A limit on the skip messages one read task keeps (the counts are always exact).
SKIPPED_KEPT = 100


@dataclasses.dataclass(frozen=True, slots=True)
class ReadOptions:
    fail_on_corruption: bool = True
    fail_on_data_loss: bool = True
    #: Skip batches whose max timestamp is below this (a pushed-down ``timestamp >=`` filter).
    min_timestamp: int | None = None


# -- the skip report ------------------------------------------------------------------------------
def write_skip_report(
    report_dir: Path, topic: str, partition: int, first: SegmentRef, counters: ReadCounters
) -> Path:
    """One read task's skips as ``<topic>-<partition>-<base>-<start>.json`` in ``report_dir``.

    Named by the planned unit, and replaced atomically, so a retried task overwrites its
    earlier attempt's file instead of counting twice.
    """
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / f"{topic}-{partition}-{first.base_offset:020d}-{first.start_offset}.json"
    document = {
        "topic": topic,
        "partition": partition,
        "segment": first.path,
        "start_offset": first.start_offset,
        **dataclasses.asdict(counters),
    }
    durability.write_atomically(path, (json.dumps(document, indent=1) + "\n").encode())
    return path


def read_skip_report(report_dir: Path) -> dict[str, Any]:
    """What the read tasks that wrote into ``report_dir`` skipped: totals, per partition, and
    their messages (an empty report for a missing directory: nothing was skipped)."""
    totals = {"corrupt_batches": 0, "lost_offsets": 0, "fallbacks": 0}
    partitions: dict[str, dict[str, int]] = {}
    messages: list[str] = []
    paths = sorted(report_dir.glob("*.json")) if report_dir.is_dir() else []
    for path in paths:
        try:
            document = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PipelineError(f"skip report {path} is unreadable: {exc}") from exc
        per = partitions.setdefault(
            f"{document['topic']}-{document['partition']}", dict.fromkeys(totals, 0)
        )
        for key in totals:
            totals[key] += int(document[key])
            per[key] += int(document[key])
        messages.extend(document["skipped"])
    return {**totals, "partitions": partitions, "skipped": messages}


def opened(
    ref: SegmentRef, directory: Path, options: ReadOptions, counters: ReadCounters
) -> Iterator[tuple[FileRecords, SegmentRef]]:
    """The open files holding the planned range ``[ref.start_offset, ref.end_offset)``, each with
    the part of the range it holds: the planned file itself (its pin, name or ``.deleted``
    name), or, when it is gone, the segments covering the range now (counted as a fallback;
    a hole among them is data loss, raised or counted by ``options``). Each file is closed
    when the consumer asks for the next one."""
    records = open_pinned(ref)
    if records is not None:
        try:
            yield records, ref
        finally:
            records.close()
        return
    # The planned file is gone (replaced or deleted longer ago than file.delete.delay.ms).
    counters.fallbacks += 1
    covered = ref.start_offset
    for _attempt in range(_FALLBACK_ATTEMPTS):
        replaced = False
        for current in current_refs(directory, covered, ref.end_offset):
            if current.start_offset > covered:
                # A hole in the current segments: retention (or delete-records) removed it.
                _lost(ref, covered, current.start_offset, options, counters)
                covered = current.start_offset
            successor = open_pinned(current)
            if successor is None:
                # Itself replaced before it was opened (a busy cleaner): list again.
                replaced = True
                break
            try:
                yield successor, current
            finally:
                successor.close()
            covered = current.end_offset
        if not replaced:
            break
    else:
        raise CorruptDataError(
            f"{ref.path}: offsets [{covered}, {ref.end_offset}) kept being replaced while read "
            f"({_FALLBACK_ATTEMPTS} attempts); retry the read"
        )
    if covered < ref.end_offset:
        _lost(ref, covered, ref.end_offset, options, counters)


def batches(
    ref: SegmentRef, directory: Path, options: ReadOptions, counters: ReadCounters
) -> Iterator[RecordBatch]:
    """Validated data batches overlapping ``[ref.start_offset, ref.end_offset)``."""
    for records, current in opened(ref, directory, options, counters):
        yield from _batches_of(records, current, options, counters)


def _lost(
    ref: SegmentRef, start: int, end: int, options: ReadOptions, counters: ReadCounters
) -> None:
    message = (
        f"offsets [{start}, {end}) planned from {ref.path} were deleted (retention or "
        f"delete-records) before this read reached them"
    )
    if options.fail_on_data_loss:
        raise DataLossError(message + "; rerun the read, or set failOnDataLoss=false to skip")
    logger.warning("%s; skipped (failOnDataLoss=false)", message)
    counters.lost_offsets += end - start
    counters.note(message)


def _batches_of(
    records: FileRecords, ref: SegmentRef, options: ReadOptions, counters: ReadCounters
) -> Iterator[RecordBatch]:
    position = index_position(records.path, ref.base_offset, ref.start_offset, ref.size_bytes)
    walk = records.batches(position, ref.size_bytes)
    batch_position = position
    while True:
        try:
            item = next(walk, None)
        except CorruptRecordError as exc:
            _corrupt(Path(ref.path), batch_position, exc, options, counters, framing=True)
            return
        if item is None:
            return
        batch_position, batch = item
        if batch.base_offset >= ref.end_offset:
            return
        try:
            batch.validate()
            last_offset = batch.last_offset
        except CorruptRecordError as exc:
            _corrupt(Path(ref.path), batch_position, exc, options, counters, framing=False)
            continue
        if last_offset < ref.start_offset or batch.is_control:
            continue
        if options.min_timestamp is not None and batch.max_timestamp < options.min_timestamp:
            continue
        yield batch


def _corrupt(
    path: Path,
    position: int | None,
    exc: CorruptRecordError,
    options: ReadOptions,
    counters: ReadCounters,
    *,
    framing: bool,
) -> None:
    message = f"{path}: {exc}" if position is None else f"{path} at position {position}: {exc}"
    if options.fail_on_corruption:
        raise CorruptDataError(
            message + " (set failOnCorruption=false to skip corrupt batches)"
        ) from exc
    counters.corrupt_batches += 1
    what = "the rest of the segment" if framing else "the batch"
    logger.warning("Skipping %s (failOnCorruption=false): %s", what, message)
    counters.note(f"skipped {what}: {message}")


def records(
    ref: SegmentRef, directory: Path, options: ReadOptions, counters: ReadCounters
) -> Iterator[tuple[Record, int]]:
    """Records of the ref's offset range, in offset order, each with its batch's timestamp
    type (0 CreateTime, 1 LogAppendTime)."""
    for batch in batches(ref, directory, options, counters):
        try:
            decoded = batch.records()
        except CorruptRecordError as exc:
            # The CRC matched but the records inside do not parse: written corrupt. The
            # message names the batch's offset and the record.
            _corrupt(Path(ref.path), None, exc, options, counters, framing=False)
            continue
        # A v0 message has no timestamp type: -1, as Spark's Kafka source shows NoTimestampType.
        timestamp_type = -1 if batch.magic == 0 else int(batch.timestamp_type)
        for record in decoded:
            if ref.start_offset <= record.offset < ref.end_offset:
                yield record, timestamp_type


def first_offset_at_or_after(
    refs: list[SegmentRef], directory: Path, timestamp: int, options: ReadOptions
) -> int | None:
    """Kafka's ListOffsets by timestamp: the first offset whose timestamp is >= ``timestamp``."""
    counters = ReadCounters()
    scan = dataclasses.replace(options, min_timestamp=timestamp)
    for ref in refs:
        for record, _type in records(ref, directory, scan, counters):
            if record.timestamp >= timestamp:
                return record.offset
    return None
