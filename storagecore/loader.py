"""Load one partition directory, finishing or undoing interrupted operations (Kafka's LogLoader).

The passes, in order; each mirrors a step of a multi-step protocol of :mod:`storagecore.local_log`:

1. **Temporary files.** Delete ``*.deleted`` (segment deletion, step 4 of
   :meth:`LocalLog.remove_and_delete_segments`, and the old segments of a swap, step 3 of
   :meth:`LocalLog.swap`). Delete every ``*.cleaned`` (a clean, split or bulk append that never
   reached its swap). A ``*.swap`` whose base offset is >= the smallest ``.cleaned`` offset
   belongs to a swap that had not finished its step 1, renaming ``.cleaned`` → ``.swap``
   (renames go in descending offset order): delete it too.
2. **Interrupted swaps.** The remaining ``.swap`` files are complete replacements (the swap was
   past its step 1): delete the non-swap segment files whose offsets fall in the swapped range,
   then strip ``.swap`` (what the swap's steps 3 and 4 would have done).
3. **Segments.** Delete index files without a ``.log`` (orphans). Open every segment (through
   the file cache: nothing is read or kept open). A missing ``.index`` or ``.timeindex`` is
   rebuilt from the log now (with a warning). The last segment is sanity-checked now; the others
   below the recovery point on their first use (:meth:`LogSegment.defer_verification`), so that
   a log dir of many segments loads without reading them. An index that fails its check, or a
   tail that is not a complete, valid batch, is recovered from the log then. Kafka rebuilds
   only a missing ``.index`` and trusts the tail after a clean shutdown; checking costs one
   header walk from the last index entry and one CRC per segment.
4. **Recovery** (only without a clean-shutdown marker). From the segment holding the recovery
   point to the end: revalidate every batch, rebuild the indexes (the ``.txnindex`` from the
   producer state, as the replay meets each ABORT marker), truncate at the first torn or
   corrupt batch and delete every later segment; each recovered segment leaves a producer
   snapshot at its end, as Kafka's ``recoverSegment`` (:func:`_recover_segment`). If the log
   end is below the checkpointed log start offset, delete everything. An empty log gets one
   segment at the log start offset.
5. **Producer state** (:func:`storagecore.producer_state.rebuild_producer_state`). Delete
   ``.snapshot.tmp`` files, snapshots at no segment's base offset (but the clean shutdown's, at
   the log end), beyond the log end or at or below the log start; load the newest valid
   snapshot (a corrupt one is reported and deleted, and the next older one tried; none: the log
   start offset), replay the batches after it, and snapshot at the log end.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

from storagecore import durability, files
from storagecore.clock import Clock
from storagecore.config import LogConfig, TopicPartition
from storagecore.errors import CorruptIndexError, CorruptRecordError
from storagecore.file_cache import FileCache
from storagecore.producer_state import (
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    ProducerStateManager,
    rebuild_producer_state,
)
from storagecore.records.file_records import FileRecords
from storagecore.segment import LogSegment
from storagecore.segment_recovery import recover_segment, sanity_check_segment

logger = logging.getLogger(__name__)

#: Digits of a segment file name's offset (a longer name is normalised before comparing).
_PREFIX_DIGITS = len(files.filename_prefix(0))


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    next_offset: int
    recovered_segments: int
    truncated_bytes: int
    producer_state: ProducerStateManager


def load_log(
    directory: Path,
    tp: TopicPartition,
    config: LogConfig,
    clock: Clock,
    *,
    recovery_point: int,
    log_start_offset: int,
    had_clean_shutdown: bool,
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    file_cache: FileCache | None = None,
    defer_delete: Callable[[Path], None] | None = None,
) -> LoadedLog:
    """Load ``directory`` (the passes of the module docstring). ``defer_delete``: the
    ``*.deleted`` files of pass 1 go to it instead of being unlinked here (the LogManager
    unlinks them after the load, so that a restart soon after retention or a clean, which
    leave thousands of them, is not bound by their unlinks; nothing reads a ``.deleted``)."""
    prefix = f"[LogLoader partition={tp}, dir={directory.parent}]"
    now_ms = clock.milliseconds()

    def open_segment(
        base_offset: int, verify_on_first_use: Callable[[LogSegment], None] | None = None
    ) -> LogSegment:
        return LogSegment.open(
            directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size_bytes=config.segment_index_bytes,
            now_ms=now_ms,
            writable_indexes=False,
            file_cache=file_cache,
            verify_on_first_use=verify_on_first_use,
        )

    # Pass 1: temporary files. One listing (names and types, no stat) serves pass 3 too
    # unless passes 1 or 2 changed the directory.
    listing = _list_files(directory)
    swap_files, changed = _remove_temp_files_and_collect_swap_files(
        directory, listing, prefix, defer_delete
    )

    # Pass 2: complete interrupted swaps.
    log_swaps = [p for p in swap_files if p.name.endswith(files.LOG_SUFFIX + files.SWAP_SUFFIX)]
    if log_swaps:
        bases: list[int] = []
        ends: list[int] = []
        for path in log_swaps:
            base = files.offset_from_file_name(path.name)
            # Read-only: opening it as a segment would create missing index files.
            records = FileRecords(path, create=False)
            try:
                ends.append(_scan_next_offset(records, base))
            finally:
                records.close()
            bases.append(base)
        low, high = min(bases), max(ends)
        for path in sorted(directory.iterdir()):
            if (
                path.is_file()
                and files.is_segment_file_name(path.name)
                and not path.name.endswith(files.SWAP_SUFFIX)
                and path.name.endswith(files.SEGMENT_SUFFIXES)
                and low <= files.offset_from_file_name(path.name) < high
            ):
                logger.info(
                    "%s Deleting %s, replaced by swap segments [%d, %d)",
                    prefix,
                    path.name,
                    low,
                    high,
                )
                path.unlink()
    for path in swap_files:
        target = path.with_name(path.name[: -len(files.SWAP_SUFFIX)])
        logger.info("%s Completing swap: %s -> %s", prefix, path.name, target.name)
        durability.rename(path, target)
    if swap_files:
        durability.fsync_dir(directory)

    # Pass 3: orphan indexes, open segments, rebuild missing or corrupt indexes.
    names = set(_list_files(directory) if changed or swap_files else listing)
    # One pass over the names, the cheap suffix test first (three names per segment).
    log_bases: list[int] = []
    index_names: list[str] = []
    for name in names:
        if name.endswith(files.LOG_SUFFIX):
            if files.is_segment_file_name(name):
                log_bases.append(files.offset_from_file_name(name))
        elif name.endswith(files.INDEX_SUFFIXES) and files.is_segment_file_name(name):
            index_names.append(name)
    log_bases.sort()
    for name in sorted(index_names):
        head = name.partition(".")[0]
        if len(head) != _PREFIX_DIGITS:
            head = files.filename_prefix(int(head))
        if head + files.LOG_SUFFIX not in names:
            logger.warning("%s Deleting orphaned index file %s", prefix, name)
            (directory / name).unlink()
    # After an unclean shutdown everything from the recovery point on is rebuilt in pass 4.
    recover_from_index = (
        len(log_bases)
        if had_clean_shutdown
        else max(bisect.bisect_right(log_bases, recovery_point) - 1, 0)
    )
    segments: list[LogSegment] = []
    recovered = 0
    truncated_total = 0
    last_position = len(log_bases) - 1

    def check_on_first_use(segment: LogSegment) -> None:
        try:
            sanity_check_segment(segment)
        except (CorruptIndexError, CorruptRecordError) as exc:
            logger.warning(
                "%s Rebuilding indexes of segment %d on first use: %s",
                prefix,
                segment.base_offset,
                exc,
            )
            recover_segment(segment, config.segment_index_bytes)

    for position, base in enumerate(log_bases):
        prefix_name = files.filename_prefix(base)
        index_missing = prefix_name + files.INDEX_SUFFIX not in names
        time_index_missing = prefix_name + files.TIME_INDEX_SUFFIX not in names
        if (
            position < recover_from_index
            and position < last_position
            and not (index_missing or time_index_missing)
        ):
            # Checked on first use instead (LogSegment.defer_verification): a log of many
            # segments loads without reading them (not even its indexes' lengths), as Kafka's
            # lazy indexes; what a check finds is rebuilt then, as here.
            segments.append(open_segment(base, check_on_first_use))
            continue
        segment = open_segment(base)
        if position < recover_from_index:
            # Kafka leaves a missing .timeindex empty (retention then falls back to mtime);
            # rebuilding it keeps time retention and timestamp lookups exact.
            problem: str | None = (
                "missing offset index"
                if index_missing
                else "missing time index"
                if time_index_missing
                else None
            )
            if problem is None:
                try:
                    sanity_check_segment(segment)
                except (CorruptIndexError, CorruptRecordError) as exc:
                    problem = str(exc)
            if problem is not None:
                logger.warning("%s Rebuilding indexes of segment %d: %s", prefix, base, problem)
                truncated_total += recover_segment(segment, config.segment_index_bytes)
                recovered += 1
        segments.append(segment)

    # Pass 4: recovery after an unclean shutdown.
    if not had_clean_shutdown and segments:
        start = max(bisect.bisect_right(log_bases, recovery_point) - 1, 0)
        for position in range(start, len(segments)):
            segment = segments[position]
            logger.info("%s Recovering unflushed segment %d", prefix, segment.base_offset)
            truncated = _recover_segment(
                segment,
                segments,
                ProducerStateManager(
                    directory, tp, clock, producer_id_expiration_ms=producer_id_expiration_ms
                ),
                log_start_offset=log_start_offset,
                index_bytes=config.segment_index_bytes,
                now_ms=now_ms,
            )
            recovered += 1
            truncated_total += truncated
            if truncated > 0 and position + 1 < len(segments):
                for later in segments[position + 1 :]:
                    logger.warning(
                        "%s Deleting segment %d after the corrupt tail of segment %d",
                        prefix,
                        later.base_offset,
                        segment.base_offset,
                    )
                    later.delete_files()
                del segments[position + 1 :]
                break
    # Segments whose recovery emptied them below an earlier segment's end cannot exist: offsets
    # are checked against the segment base in recover_segment().

    if segments:
        next_offset = segments[-1].next_offset()
        if next_offset < log_start_offset:
            logger.warning(
                "%s Log end offset %d is below the log start offset %d: deleting all segments",
                prefix,
                next_offset,
                log_start_offset,
            )
            for segment in segments:
                segment.delete_files()
            segments = []
    if not segments:
        segments = [open_segment(log_start_offset)]
    active = segments[-1]
    active.offset_index.resize(config.segment_index_bytes)
    active.time_index.resize(config.segment_index_bytes)
    next_offset = active.next_offset()
    loaded_recovery_point = next_offset if had_clean_shutdown else min(recovery_point, next_offset)
    start_offset = max(log_start_offset, segments[0].base_offset)
    loaded_recovery_point = max(loaded_recovery_point, min(start_offset, next_offset))
    # Pass 5: producer state.
    producer_state = ProducerStateManager(
        directory, tp, clock, producer_id_expiration_ms=producer_id_expiration_ms
    )
    producer_state.remove_stray_snapshots(segment.base_offset for segment in segments)
    rebuild_producer_state(
        producer_state,
        segments,
        log_start_offset=start_offset,
        last_offset=next_offset,
        now_ms=now_ms,
    )
    logger.info(
        "%s Loaded %d segments: log start %d, log end %d, recovery point %d%s",
        prefix,
        len(segments),
        start_offset,
        next_offset,
        loaded_recovery_point,
        "" if had_clean_shutdown else " (unclean shutdown)",
    )
    return LoadedLog(
        segments=segments,
        log_start_offset=start_offset,
        recovery_point=loaded_recovery_point,
        next_offset=next_offset,
        recovered_segments=recovered,
        truncated_bytes=truncated_total,
        producer_state=producer_state,
    )


def _recover_segment(
    segment: LogSegment,
    segments: list[LogSegment],
    producer_state: ProducerStateManager,
    *,
    log_start_offset: int,
    index_bytes: int,
    now_ms: int,
) -> int:
    """Recover one unflushed segment and snapshot the producers at its end (Kafka's
    ``LogLoader.recoverSegment``), rebuilding its transaction index; the bytes truncated.

    ``producer_state`` is a manager of its own, as in Kafka: it loads the producers up to the
    segment's base offset (the newest snapshot at or below it, then the log; snapshots above it
    are deleted), replays the recovered segment and writes a snapshot at its end, so that the
    next segment's recovery, and the load's own producer state afterwards, start from there.
    A snapshot holds each producer's last batch only: after an unclean shutdown a retry is
    recognised as a duplicate only for that batch, as on Kafka's broker.
    """
    rebuild_producer_state(
        producer_state,
        segments,
        log_start_offset=log_start_offset,
        last_offset=segment.base_offset,
        now_ms=now_ms,
    )
    truncated = recover_segment(segment, index_bytes)
    # The transaction index anew, as the replay meets the ABORT markers.
    segment.txn_index.reset()
    producer_state.replay(segment.producer_batches(segment.base_offset), segment.txn_index)
    producer_state.map_end_offset = max(producer_state.map_end_offset, segment.next_offset())
    producer_state.take_snapshot()
    return truncated


def _list_files(directory: Path) -> list[str]:
    """Names of the regular files in ``directory``, sorted (types from the directory entries:
    no stat per file)."""
    with os.scandir(directory) as entries:
        return sorted(entry.name for entry in entries if entry.is_file())


def _remove_temp_files_and_collect_swap_files(
    directory: Path,
    names: list[str],
    prefix: str,
    defer_delete: Callable[[Path], None] | None,
) -> tuple[list[Path], bool]:
    """The valid ``.swap`` files, and whether anything was deleted (a ``.deleted`` file
    handed to ``defer_delete`` counts as gone: pass 3 ignores its name)."""
    swap_files: list[Path] = []
    cleaned_files: list[Path] = []
    min_cleaned_offset: int | None = None
    deleted = False
    for name in names:
        if not name.endswith((files.DELETED_SUFFIX, files.CLEANED_SUFFIX, files.SWAP_SUFFIX)):
            continue
        path = directory / name
        if name.endswith(files.DELETED_SUFFIX):
            if name.endswith(".checkpoint" + files.DELETED_SUFFIX):
                continue
            if defer_delete is not None:
                defer_delete(path)
                continue
            logger.info("%s Deleting stray temporary file %s", prefix, name)
            path.unlink()
            deleted = True
        elif name.endswith(files.CLEANED_SUFFIX) and files.is_segment_file_name(name):
            offset = files.offset_from_file_name(name)
            min_cleaned_offset = (
                offset if min_cleaned_offset is None else min(min_cleaned_offset, offset)
            )
            cleaned_files.append(path)
        elif name.endswith(files.SWAP_SUFFIX) and files.is_segment_file_name(name):
            swap_files.append(path)
    for path in cleaned_files:
        logger.info("%s Deleting stray temporary file %s", prefix, path.name)
        path.unlink()
        deleted = True
    valid: list[Path] = []
    for path in swap_files:
        if (
            min_cleaned_offset is not None
            and files.offset_from_file_name(path.name) >= min_cleaned_offset
        ):
            logger.info(
                "%s Deleting invalid swap file %s (min cleaned offset %d)",
                prefix,
                path.name,
                min_cleaned_offset,
            )
            path.unlink()
            deleted = True
        else:
            valid.append(path)
    return valid, deleted


def _scan_next_offset(records: FileRecords, base_offset: int) -> int:
    next_offset = base_offset
    for header in records.batch_headers(0):
        next_offset = header.next_offset
    return next_offset
