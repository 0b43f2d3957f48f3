"""Offline consistency check of log directories (``logkeeper verify``). Reads, never writes.

For every partition directory: each batch's size, magic and CRC and the framing of its records;
offsets increasing across batches and segments and addressable from the segment base; no bytes
after the last complete batch; offset and time index entries sorted, pointing at batch starts
and inside the segment; producer-state snapshots decode (CRC, version, length) and lie within
the log; leftover temporary files. For the log dir root: every checkpoint file
parses and its offsets lie within the partition's ``[first segment base, log end]``.

Findings are ``error`` (data the loader would have to truncate or rebuild, or a checkpoint it
would discard) or ``warning`` (state the loader resolves by design: temp files, a dir that was
not cleanly shut down). When another process holds the log dir's ``.lock`` (a running worker),
the active segments' preallocated indexes and a batch being written are expected, and are
reported as warnings.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

from storagecore import files, log_dir_view
from storagecore.config import TopicPartition
from storagecore.errors import (
    ConfigError,
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    StorageError,
)
from storagecore.index.offset_index import ENTRY as OFFSET_ENTRY
from storagecore.index.time_index import ENTRY as TIME_ENTRY
from storagecore.index.transaction_index import decode_entries
from storagecore.producer_state.snapshot import is_snapshot_file_name, read_snapshot
from storagecore.records import layout
from storagecore.records.file_records import FileRecords


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    severity: str  # "error" or "warning"
    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.severity.upper()} {self.path}: {self.message}"


@dataclasses.dataclass(slots=True)
class PartitionSummary:
    tp: TopicPartition
    segments: int = 0
    batches: int = 0
    records: int = 0
    size_bytes: int = 0
    first_offset: int | None = None
    next_offset: int | None = None
    #: Batches per message format: {2: v2 batches, 1: v1 entries, 0: v0 entries} (a log dir
    #: that has lived since Kafka 0.9/0.10 shows its legacy entries here).
    batches_by_magic: dict[int, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class VerifyReport:
    findings: list[Finding] = dataclasses.field(default_factory=list)
    partitions: list[PartitionSummary] = dataclasses.field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, path: Path, message: str) -> None:
        self.findings.append(Finding("error", path, message))

    def warning(self, path: Path, message: str) -> None:
        self.findings.append(Finding("warning", path, message))


def verify_log_dir(root: Path) -> VerifyReport:
    """Verify a log dir (the parent of ``<topic>-<partition>`` dirs) or one partition dir."""
    report = VerifyReport()
    if not root.is_dir():
        report.error(root, "not a directory")
        return report
    children = sorted(p for p in root.iterdir() if p.is_dir())
    root_dir: Path | None = root
    partition_dirs = children
    if not children:
        try:  # a partition directory itself (it has no sub-directories)
            files.parse_partition_dir_name(root.name)
            partition_dirs, root_dir = [root], None
        except ConfigError:
            pass
    live = log_dir_view.in_use(root_dir if root_dir is not None else root.parent)
    if live:
        report.warning(root, "in use by another process: the active segments may be mid-write")
    ends: dict[TopicPartition, tuple[int, int]] = {}
    for directory in partition_dirs:
        if directory.name in files.PIPELINE_DIRS:
            continue  # the Spark pipeline's read pins and write staging, not partitions
        if files.is_delete_dir_name(directory.name):
            report.warning(directory, "partition directory pending deletion")
            continue
        try:
            tp = files.parse_partition_dir_name(directory.name)
        except ConfigError as exc:
            report.warning(directory, f"not a partition directory ({exc})")
            continue
        summary = _verify_partition(directory, tp, report, live)
        report.partitions.append(summary)
        if summary.first_offset is not None and summary.next_offset is not None:
            ends[tp] = (summary.first_offset, summary.next_offset)
    if root_dir is not None:
        _verify_root(root_dir, ends, report)
    return report


class _Downgraded(VerifyReport):
    """A view of a report that files errors as warnings."""

    def __init__(self, report: VerifyReport) -> None:
        super().__init__(findings=report.findings, partitions=report.partitions)

    def error(self, path: Path, message: str) -> None:
        self.warning(path, f"{message} (expected while the segment is being written)")


def _verify_root(
    root: Path, ends: dict[TopicPartition, tuple[int, int]], report: VerifyReport
) -> None:
    if not (root / files.CLEAN_SHUTDOWN_FILE).exists() and ends:
        report.warning(
            root, "no .kafka_cleanshutdown marker: the next load recovers from the recovery points"
        )
    for name in log_dir_view.CHECKPOINT_FILES:
        path = root / name
        if not path.exists():
            continue
        try:
            offsets = log_dir_view.read_checkpoint(path)
        except CorruptCheckpointError as exc:
            report.error(path, str(exc))
            continue
        for tp, offset in offsets.items():
            if tp not in ends:
                report.warning(path, f"entry for {tp}, which has no partition directory")
                continue
            first, end = ends[tp]
            if not 0 <= offset <= end:
                report.error(path, f"{tp} offset {offset} is outside [0, log end {end}]")
            elif name == files.LOG_START_OFFSET_CHECKPOINT and offset < first:
                report.error(
                    path, f"{tp} log start offset {offset} is below the first segment base {first}"
                )


def _verify_partition(
    directory: Path, tp: TopicPartition, report: VerifyReport, live: bool
) -> PartitionSummary:
    summary = PartitionSummary(tp)
    names = sorted(p.name for p in directory.iterdir() if p.is_file())
    temporary = set(log_dir_view.temporary_file_names(names))
    orphans = set(log_dir_view.orphan_index_names(names))
    for name in names:
        if name in temporary:
            report.warning(directory / name, "temporary file left by an interrupted operation")
        elif name in orphans:
            report.warning(directory / name, "index file without a .log segment")
    bases = log_dir_view.segment_bases(names)
    expected = None
    for base in bases:
        path = files.log_file(directory, base)
        if expected is not None and base < expected:
            report.error(
                path, f"base offset {base} overlaps the previous segment, which ends at {expected}"
            )
        # In a live dir the last segment is the one being written: its tail and its
        # preallocated indexes are in flux, so findings there are warnings.
        segment_report = _Downgraded(report) if live and base == bases[-1] else report
        next_offset, batch_ends = _verify_segment(path, base, segment_report, summary)
        _verify_offset_index(
            files.index_file(directory, base), base, next_offset, batch_ends, segment_report
        )
        _verify_time_index(
            files.time_index_file(directory, base), base, next_offset, segment_report
        )
        _verify_txn_index(files.txn_index_file(directory, base), base, next_offset, segment_report)
        summary.segments += 1
        if summary.first_offset is None:
            summary.first_offset = base
        expected = max(next_offset, base)
        summary.next_offset = expected
    for name in names:
        if is_snapshot_file_name(name):
            _verify_snapshot(directory / name, summary, report)
    return summary


def _verify_snapshot(path: Path, summary: PartitionSummary, report: VerifyReport) -> None:
    """A corrupt snapshot is one the loader would discard (an error); one beyond the log end
    is one it would delete (a warning: a truncation left it)."""
    try:
        read_snapshot(path)
    except CorruptSnapshotError as exc:
        report.error(path, str(exc).removeprefix(f"{path}: "))
        return
    offset = files.offset_from_file_name(path.name)
    if summary.next_offset is not None and offset > summary.next_offset:
        report.warning(
            path, f"producer snapshot at {offset}, beyond the log end {summary.next_offset}"
        )


def _verify_segment(
    path: Path, base: int, report: VerifyReport, summary: PartitionSummary
) -> tuple[int, dict[int, tuple[int, int]]]:
    """Returns the segment's next offset and {batch position: (base offset, last offset)}."""
    records = FileRecords(path, create=False)
    batches: dict[int, tuple[int, int]] = {}
    next_offset = base
    valid_end = 0
    try:
        summary.size_bytes += records.size_bytes
        try:
            for position, batch in records.batches(0):
                try:
                    batch.validate()
                    batch.records()
                except StorageError as exc:
                    report.error(path, f"position {position}: {exc}")
                    return next_offset, batches
                if batch.base_offset < max(next_offset, base):
                    report.error(
                        path,
                        f"position {position}: base offset {batch.base_offset} is below "
                        f"{max(next_offset, base)}",
                    )
                if batch.last_offset - base > layout.INT32_MAX:
                    report.error(
                        path,
                        f"position {position}: offset {batch.last_offset} overflows the "
                        "relative offset",
                    )
                batches[position] = (batch.base_offset, batch.last_offset)
                next_offset = batch.next_offset
                valid_end = position + batch.size_bytes
                summary.batches += 1
                summary.batches_by_magic[batch.magic] = (
                    summary.batches_by_magic.get(batch.magic, 0) + 1
                )
                summary.records += batch.records_count
        except CorruptRecordError as exc:
            report.error(path, str(exc))
            return next_offset, batches
        if valid_end < records.size_bytes:
            report.error(
                path,
                f"{records.size_bytes - valid_end} bytes after the last complete batch "
                f"(position {valid_end}): a torn or corrupt tail",
            )
    finally:
        records.close()
    return next_offset, batches


def _read_entries(
    path: Path, entry: struct.Struct, report: VerifyReport
) -> list[tuple[int, ...]] | None:
    if not path.exists():
        report.warning(path, "missing; the loader rebuilds it")
        return None
    entries, trailing = log_dir_view.index_entries(path, entry)
    if trailing:
        length = len(entries) * entry.size + trailing
        report.error(path, f"length {length} is not a multiple of {entry.size}")
    # An index preallocated for an active segment and never trimmed (an unclean shutdown, or a
    # live segment) ends in all-zero entries; no valid entry after the first can be all zero.
    for n, values in enumerate(entries[1:], start=1):
        if not any(values):
            report.error(
                path, f"entries from {n} on are zero: the preallocated tail of an untrimmed index"
            )
            return entries[:n]
    return entries


def _verify_offset_index(
    path: Path,
    base: int,
    next_offset: int,
    batches: dict[int, tuple[int, int]],
    report: VerifyReport,
) -> None:
    entries = _read_entries(path, OFFSET_ENTRY, report)
    if not entries:
        return
    previous = (-1, -1)
    for n, (relative, position) in enumerate(entries):
        offset = base + relative
        if offset <= previous[0] or position < previous[1]:
            report.error(
                path, f"entry {n} (offset {offset}, position {position}) does not follow {previous}"
            )
            return
        if position not in batches:
            report.error(
                path, f"entry {n} points at position {position}, which is not a batch start"
            )
            return
        if not batches[position][0] <= offset < next_offset:
            report.error(
                path, f"entry {n}: offset {offset} is not in or after the batch at {position}"
            )
            return
        previous = (offset, position)


def _verify_txn_index(path: Path, base: int, next_offset: int, report: VerifyReport) -> None:
    """Kafka's checks of a ``.txnindex`` (and order), and every marker inside the segment."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return  # no aborted transaction has its marker here
    try:
        entries = decode_entries(data, path, base)
    except CorruptIndexError as exc:
        report.error(path, str(exc).removeprefix(f"{path}: ") + " (the loader rebuilds it)")
        return
    for n, txn in enumerate(entries):
        if txn.last_offset >= max(next_offset, base + 1):
            report.error(
                path,
                f"entry {n}: marker offset {txn.last_offset} is beyond the segment's end "
                f"{next_offset}",
            )
            return


def _verify_time_index(path: Path, base: int, next_offset: int, report: VerifyReport) -> None:
    entries = _read_entries(path, TIME_ENTRY, report)
    if not entries:
        return
    previous = (layout.NO_TIMESTAMP - 1, -1)
    for n, (timestamp, relative) in enumerate(entries):
        offset = base + relative
        if timestamp <= previous[0] or offset < previous[1]:
            report.error(
                path,
                f"entry {n} (timestamp {timestamp}, offset {offset}) does not follow {previous}",
            )
            return
        if not base <= offset < max(next_offset, base + 1):
            report.error(
                path, f"entry {n}: offset {offset} is outside the segment [{base}, {next_offset})"
            )
            return
        previous = (timestamp, offset)
