"""The filter pass drops a batch whose records are all superseded without reading its records,
when the map pass's notes show it (storagecore/cleaner/_cleaner_batch.h: superseded_batch):
the same files, counters, lookups and probes as the reference, which reads every record; and
never for a batch the notes cannot speak for (offset deltas that are not 0, 1, ..., a batch
that must stay as an empty batch)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from storagecore import Compression, Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner import Cleaner, CleanerStats, CleanRequest
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.errors import CorruptRecordError
from storagecore.records import layout
from storagecore.records.crc import crc32c
from tests.unit.storagecore.helpers.native_cleaner import (
    SECRET,
    START_MS,
    _counters,
    _files,
    needs_native,
)

CONFIG = LogConfig(cleanup_policy=("compact",))


def clean_both_ways(
    tmp_path: Path, write: Callable[[Log], None]
) -> list[tuple[Log, SkimpyOffsetMap, CleanerStats | Exception]]:
    """The log ``write(log)`` leaves, cleaned once by the C engine (with notes) and once by the
    reference: (log, map, stats or the error the round raised) for each."""
    cleaned: list[tuple[Log, SkimpyOffsetMap, CleanerStats | Exception]] = []
    for name, native in (("native", True), ("python", False)):
        log = Log.open(tmp_path / name / "t-0", CONFIG, ManualClock(START_MS))
        write(log)
        offset_map = SkimpyOffsetMap(24 * 100_000, native=native, secret=SECRET)
        outcome: CleanerStats | Exception
        try:
            outcome = Cleaner(offset_map=offset_map).clean(
                CleanRequest(log, 0, log.active_segment.base_offset)
            )
        except CorruptRecordError as exc:
            outcome = exc
        cleaned.append((log, offset_map, outcome))
    return cleaned


def assert_same(cleaned: list[tuple[Log, SkimpyOffsetMap, CleanerStats | Exception]]) -> None:
    (native_log, native_map, native), (python_log, python_map, python) = cleaned
    if isinstance(python, Exception):
        assert isinstance(native, Exception), native
        assert str(native).split(":")[0] == str(python).split(":")[0]
    else:
        assert isinstance(native, CleanerStats), native
        assert _counters(native) == _counters(python)
    assert _files(native_log.directory) == _files(python_log.directory)
    assert (native_map.lookups, native_map.probes) == (python_map.lookups, python_map.probes)
    assert python_map.unread_batches == 0
    for log, _, _ in cleaned:
        log.close()


@needs_native
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_superseded_batches_are_dropped_without_reading_their_records(
    tmp_path: Path, codec: Compression
) -> None:
    """30 batches over 40 keys, then one batch of every key: the 30 are superseded whole and
    the filter pass drops them unread; the round is the reference's, record for record."""
    keys = [b"key-%d" % k for k in range(40)]

    def write(log: Log) -> None:
        rng = random.Random(5)
        for _ in range(30):
            batch = [NewRecord(key=rng.choice(keys), value=b"v" * 30) for _ in range(20)]
            log.append(build_batch(batch, compression=codec))
        log.append(build_batch([NewRecord(key=k, value=b"last") for k in keys], compression=codec))
        log.roll()

    cleaned = clean_both_ways(tmp_path, write)
    native_map, native = cleaned[0][1], cleaned[0][2]
    assert isinstance(native, CleanerStats)
    assert native_map.unread_batches == 30
    assert (native.messages_read, native.messages_written) == (640, 40)
    assert_same(cleaned)


def with_last_offset_delta(batch: bytes, delta: int) -> bytes:
    """``batch`` with its header's last offset delta set to ``delta`` (below its records'
    deltas, which build_batch refuses to write) and its CRC made valid again."""
    out = bytearray(batch)
    out[layout.LAST_OFFSET_DELTA_OFFSET : layout.LAST_OFFSET_DELTA_OFFSET + 4] = delta.to_bytes(4)
    crc = crc32c(out[layout.ATTRIBUTES_OFFSET :])
    out[layout.CRC_OFFSET : layout.CRC_OFFSET + 4] = crc.to_bytes(4)
    return bytes(out)


@needs_native
def test_a_batch_whose_offset_deltas_are_not_its_indexes_is_read(tmp_path: Path) -> None:
    """Batch X covers offsets 2..3 by its header, but its records sit at offsets 2 and 7 (deltas
    0 and 5); batch W's second record sits at offset 3. Each offset of X's range then has a note
    (W's key at 3), and both keys are superseded by batch Z; but X's record at 7 is the latest of
    its key. The map pass makes the notes of such a batch unknown, so the filter reads X's
    records and decides as the reference does (without that, X was dropped unread)."""

    def write(log: Log) -> None:
        raw = b"".join(
            (
                with_last_offset_delta(
                    build_batch(
                        [NewRecord(b"w", b"1"), NewRecord(b"c", b"1", offset_delta=3)],
                        base_offset=0,
                    ),
                    1,
                ),
                with_last_offset_delta(
                    build_batch(
                        [NewRecord(b"a", b"1"), NewRecord(b"b", b"latest", offset_delta=5)],
                        base_offset=2,
                    ),
                    1,
                ),
                build_batch([NewRecord(b"a", b"2"), NewRecord(b"c", b"2")], base_offset=4),
            )
        )
        log.active_segment.append(5, START_MS, 4, raw)
        log.roll()

    cleaned = clean_both_ways(tmp_path, write)
    assert cleaned[0][1].unread_batches == 0
    assert_same(cleaned)


@needs_native
def test_a_superseded_batch_that_must_stay_empty_is_read(tmp_path: Path) -> None:
    """An active producer's last batch stays as an empty batch even when every record in it
    is superseded (its producer state must survive): the filter does not drop it unread."""

    def write(log: Log) -> None:
        for sequence in range(0, 30, 10):
            batch = [NewRecord(b"key-%d" % k, b"p", timestamp=START_MS) for k in range(10)]
            log.append(build_batch(batch, producer_id=7, producer_epoch=0, base_sequence=sequence))
        log.append(
            build_batch([NewRecord(b"key-%d" % k, b"x", timestamp=START_MS) for k in range(10)])
        )
        log.roll()

    cleaned = clean_both_ways(tmp_path, write)
    native_map, native = cleaned[0][1], cleaned[0][2]
    assert isinstance(native, CleanerStats)
    # The producer's first two batches are dropped unread; its last is kept, empty.
    assert native_map.unread_batches == 2
    assert native.messages_written == 10
    assert_same(cleaned)
