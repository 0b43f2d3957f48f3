"""Logs and cleaning rounds for the cleaner's unit tests (test_cleaner*.py, and the transaction
tests that clean: test_read_committed.py, test_log_txn_index.py, storagepipeline's
test_partition_clean.py): a compacted config with small segments, appends of plain,
idempotent and transactional batches and of markers, and one round as the LogCleaner runs it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from storagecore import (
    AppendOrigin,
    Compression,
    ControlType,
    Log,
    LogConfig,
    ManualClock,
    NewRecord,
    build_batch,
    build_control_batch,
)
from storagecore.cleaner import Cleaner, CleanerStats, CleanRequest
from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.records.batch import RecordBatch
from tests.conftest import START_MS

COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=1024,
    index_interval_bytes=128,
    file_delete_delay_ms=0,
    delete_retention_ms=1000,
)
PID = 4000
EPOCH = 3


def open_log(tmp_path: Path, clock: ManualClock, config: LogConfig = COMPACT) -> Log:
    return Log.open(tmp_path / "t-0", config, clock)


def put(
    log: Log,
    key: bytes | None,
    value: bytes | None,
    *,
    ts: int | None = None,
    codec: Compression = Compression.NONE,
) -> int:
    return log.append(
        build_batch(
            [NewRecord(key=key, value=value, timestamp=START_MS if ts is None else ts)],
            compression=codec,
        )
    ).first_offset


def put_many(log: Log, pairs: Sequence[tuple[bytes | None, bytes | None]], **kw: object) -> None:
    for key, value in pairs:
        put(log, key, value, **kw)  # type: ignore[arg-type]


def txn_append(log: Log, keys: Sequence[bytes], *, pid: int = PID, seq: int = 0) -> int:
    return log.append(
        build_batch(
            [NewRecord(key=k, value=b"v-" + k, timestamp=START_MS) for k in keys],
            producer_id=pid,
            producer_epoch=EPOCH,
            base_sequence=seq,
            is_transactional=True,
        )
    ).first_offset


def idempotent_append(log: Log, keys: Sequence[bytes], *, pid: int, seq: int) -> int:
    return log.append(
        build_batch(
            [NewRecord(key=k, value=b"v-" + k, timestamp=START_MS) for k in keys],
            producer_id=pid,
            producer_epoch=EPOCH,
            base_sequence=seq,
        )
    ).first_offset


def marker(log: Log, control: ControlType, *, pid: int = PID) -> int:
    return log.append(
        build_control_batch(
            control, producer_id=pid, producer_epoch=EPOCH, coordinator_epoch=0, timestamp=START_MS
        ),
        origin=AppendOrigin.COORDINATOR,
    ).first_offset


def run_round(
    log: Log,
    cleaner: Cleaner | None = None,
    *,
    first_dirty: int | None = None,
    now: int | None = None,
) -> CleanerStats:
    """One round from ``first_dirty`` (default: the log start) up to the first uncleanable
    offset, as the LogCleaner would run it."""
    cleaner = cleaner or Cleaner(offset_map=SkimpyOffsetMap(24 * 1024))
    now = log.clock.milliseconds() if now is None else now
    offsets = cleanable_offsets(log, first_dirty, now)
    to_clean = log_to_clean(log, offsets, now)
    return cleaner.clean(
        CleanRequest(log, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset), now
    )


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.records(log.log_start_offset)]


def keys_of(log: Log) -> list[bytes | None]:
    return [key for _, key, _ in contents(log)]


def batches(log: Log) -> list[RecordBatch]:
    return [b for s in log.segments for _, b in s.log.batches()]


def latest_per_key(
    pairs: Sequence[tuple[bytes | None, bytes | None]], upto: int
) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for offset, (key, _) in enumerate(pairs[:upto]):
        if key is not None:
            latest[key] = offset
    return latest
