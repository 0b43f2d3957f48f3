"""Old Kafka log dirs: segments of v0/v1 messages (built by kafka-python's legacy builder)
followed by v2 batches after an upgrade load, recover, answer time lookups, verify, dump and
clean (kafka-log-layer.md §1.8, §8.4, §8.7; issue 21)."""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner import Cleaner, CleanerStats, CleanRequest
from storagecore.cleaner.legacy import _message_set, map_legacy_keys, retain_legacy_record
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.records import _columns_py, columns
from storagecore.records.codecs import Compression
from storagecore.records.columns_types import COLUMN_NAMES, DecodedColumns
from storagecore.records.legacy import LegacyRecordBatch
from storagecore.tools.dump import dump_file
from storagecore.tools.verify import verify_log_dir
from tests.legacy_data import Message, entries, kp_entry, kp_read, write_segment

START_MS = 1_700_000_000_000
COMPACT = LogConfig(
    cleanup_policy=("compact",),
    index_interval_bytes=64,
    file_delete_delay_ms=0,
    delete_retention_ms=1000,
    min_cleanable_dirty_ratio=0.01,
)


def msgs(
    count: int, ts: int, keys: int = 3, *, tombstone_every: int = 0, keyless_every: int = 0
) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for i in range(count):
        key = (
            None
            if keyless_every and i % keyless_every == keyless_every - 1
            else b"k%d" % (i % keys)
        )
        value = None if tombstone_every and i % tombstone_every == 1 else b"v%d@%d" % (i, ts)
        out.append((ts + i, key, value))
    return out


def legacy_history() -> tuple[list[bytes], int]:
    """Every variant: v0 plain, gzip, snappy, lz4 (KAFKA-3160); v1 plain, gzip, snappy, lz4
    with LogAppendTime; 0.9 then 0.10 then (by the caller) 0.11+."""
    parts: list[bytes] = []
    offset = 0
    for magic, codec, count, lat in [
        (0, 0, 3, None), (0, 1, 4, None), (0, 2, 5, None), (0, 3, 2, None),
        (1, 0, 3, None), (1, 1, 4, None), (1, 2, 6, None), (1, 3, 3, START_MS + 5000),
    ]:  # fmt: skip
        parts.append(
            kp_entry(
                magic, codec, msgs(count, START_MS + 100 * offset), offset, log_append_time=lat
            )
        )
        offset += count
    return parts, offset


def v2_batch(base: int, count: int, ts: int) -> bytes:
    return build_batch(
        [NewRecord(b"k%d" % (i % 3), b"new%d" % i, ts + i) for i in range(count)], base_offset=base
    )


def mixed_dir(root: Path) -> tuple[Path, list[Message]]:
    parts, end = legacy_history()
    directory = root / "t-0"
    write_segment(directory, 0, [*parts, v2_batch(end, 4, START_MS + 10_000)])
    model = kp_read(b"".join(parts)) + [
        Message(end + i, START_MS + 10_000 + i, b"k%d" % (i % 3), b"new%d" % i) for i in range(4)
    ]
    return directory, model


def read_all(log: Log) -> list[Message]:
    return [Message(r.offset, r.timestamp, r.key, r.value) for r in log.records()]


@pytest.mark.parametrize("clean_shutdown", [False, True])
def test_mixed_segment_loads_and_reads_as_kafka_python_reads_it(
    tmp_path: Path, clean_shutdown: bool
) -> None:
    directory, model = mixed_dir(tmp_path)
    log = Log.open(directory, COMPACT, ManualClock(START_MS), had_clean_shutdown=clean_shutdown)
    try:
        assert read_all(log) == model
        assert log.log_end_offset == model[-1].offset + 1
        # A read from an offset inside a wrapper starts at the wrapper (as Kafka serves it).
        assert [r.offset for r in log.records(9, 11)] == [9, 10]
        fetched = log.read(10, 1 << 20)
        first = LegacyRecordBatch(bytes(fetched.records[: 12 + 200]))  # one v0 snappy wrapper
        assert first.magic == 0 and first.last_offset == 11
    finally:
        log.close()


def test_time_lookups_over_legacy_data(tmp_path: Path) -> None:
    """v0 has no timestamp: a lookup never finds it (Kafka answers -1 for v0-only data); v1's
    timestamps, a LogAppendTime wrapper's included, are found."""
    directory, model = mixed_dir(tmp_path)
    log = Log.open(directory, COMPACT, ManualClock(START_MS), had_clean_shutdown=False)
    try:
        first_v1 = next(m for m in model if m.timestamp >= 0)
        assert first_v1.offset == 14
        found = log.offset_for_timestamp(0)
        assert found is not None and (found.offset, found.timestamp) == (14, first_v1.timestamp)
        lat = log.offset_for_timestamp(START_MS + 3000)
        assert lat is not None and (lat.offset, lat.timestamp) == (
            27,
            START_MS + 5000,
        )  # the first message of the LAT wrapper
        assert max(s.time_index.entries for s in log.segments) >= 0
    finally:
        log.close()
    v0_only = tmp_path / "v0" / "t-0"
    write_segment(v0_only, 0, [kp_entry(0, 1, msgs(5, 0), 0)])
    log = Log.open(v0_only, COMPACT, ManualClock(START_MS), had_clean_shutdown=False)
    try:
        assert log.offset_for_timestamp(0) is None
        assert [r.timestamp for r in log.records()] == [-1] * 5
    finally:
        log.close()


def test_torn_legacy_tail_is_truncated_and_indexes_rebuilt(tmp_path: Path) -> None:
    parts, end = legacy_history()
    directory = tmp_path / "t-0"
    torn = parts[-1][: len(parts[-1]) // 2]
    path = write_segment(directory, 0, [*parts[:-1], torn])
    log = Log.open(directory, COMPACT, ManualClock(START_MS), had_clean_shutdown=False)
    try:
        assert path.stat().st_size == sum(map(len, parts[:-1]))
        assert read_all(log) == kp_read(b"".join(parts[:-1]))
        assert log.log_end_offset == end - 3
        assert log.segments[0].offset_index.entries > 0  # rebuilt over the legacy entries
        # Appends after the upgrade go on in v2.
        log.append(build_batch([NewRecord(b"k", b"after", START_MS)]))
        assert read_all(log)[-1] == Message(end - 3, START_MS, b"k", b"after")
    finally:
        log.close()
    # A corrupt CRC in the middle of the legacy data truncates from there on recovery.
    data = bytearray(path.read_bytes())
    data[len(parts[0]) + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    log = Log.open(directory, COMPACT, ManualClock(START_MS), had_clean_shutdown=False)
    try:
        assert log.log_end_offset == 3 and path.stat().st_size == len(parts[0])
    finally:
        log.close()


def test_verify_and_dump_show_the_format(tmp_path: Path) -> None:
    directory, model = mixed_dir(tmp_path)
    Log.open(directory, COMPACT, ManualClock(START_MS), had_clean_shutdown=False).close()
    report = verify_log_dir(tmp_path)
    assert report.ok, [str(f) for f in report.errors]
    (summary,) = report.partitions
    assert (summary.records, summary.next_offset) == (len(model), model[-1].offset + 1)
    assert summary.batches_by_magic == {0: 6, 1: 6, 2: 1}  # 3 plain + 3 wrappers of each
    lines = list(dump_file(directory / "00000000000000000000.log", records=True))
    assert (
        "offset: 0 position: 0 NoTimestampType: -1 size: 44 magic: 0 compresscodec: none"
        in (lines[2])
    )
    assert any("magic: 0 compresscodec: lz4" in line and "isvalid: true" in line for line in lines)
    assert any("LogAppendTime: 1700000005000" in line and "magic: 1" in line for line in lines)
    assert any(line.startswith("baseOffset: 30 lastOffset: 33") for line in lines)
    assert "| offset: 1 NoTimestampType: -1 keySize: 2 valueSize: " in "\n".join(lines)
    # A flipped byte shows as invalid, naming the position.
    path = directory / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[44 + 40] ^= 0xFF  # inside the second message
    path.write_bytes(bytes(data))
    report = verify_log_dir(tmp_path)
    assert any("position 44" in str(f) and "CRC-32 mismatch" in str(f) for f in report.errors)


# -- the cleaner ------------------------------------------------------------------------------
def legacy_compacted_dir(root: Path) -> tuple[Path, list[tuple[int, bytes | None, bytes | None]]]:
    """Three legacy segments (v0 gzip, v0 plain + v1 lz4, v1 snappy) and an active v2 one;
    keys repeat across them, with tombstones and keyless messages."""
    directory = root / "t-0"
    layout_ = [
        [(0, 1, msgs(8, START_MS, tombstone_every=4, keyless_every=5))],
        [(0, 0, msgs(3, START_MS + 100, keys=4)), (1, 3, msgs(6, START_MS + 200, keys=5))],
        [(1, 2, msgs(7, START_MS + 300, keys=2, tombstone_every=3))],
    ]
    offset = 0
    history: list[tuple[int, bytes | None, bytes | None]] = []
    for segment in layout_:
        base = offset
        parts = []
        for magic, codec, messages in segment:
            parts.append(kp_entry(magic, codec, messages, offset))
            history += [(offset + i, k, v) for i, (_, k, v) in enumerate(messages)]
            offset += len(messages)
        write_segment(directory, base, parts)
    write_segment(directory, offset, [v2_batch(offset, 2, START_MS + 9000)])
    history += [(offset, b"k0", b"new0"), (offset + 1, b"k1", b"new1")]
    return directory, history


def expected_after_clean(
    history: list[tuple[int, bytes | None, bytes | None]],
    upper: int,
    tombstone_kept: Callable[[int], bool],
    first_dirty: int = 0,
) -> list[tuple[int, bytes | None, bytes | None]]:
    """The model (Kafka's shouldRetainRecord): below ``upper``, keyless messages go, a record
    stays if no later one in ``[first_dirty, upper)`` has its key, a tombstone only while
    ``tombstone_kept(offset)``; at and above ``upper``, everything."""
    latest = {k: o for o, k, _ in history if k is not None and first_dirty <= o < upper}
    return [
        (o, k, v)
        for o, k, v in history
        if o >= upper
        or (k is not None and latest.get(k, -1) <= o and (v is not None or tombstone_kept(o)))
    ]


@pytest.mark.parametrize("native", [True, False], ids=["native-map", "reference"])
def test_cleaner_keeps_the_latest_per_key_in_the_same_format(tmp_path: Path, native: bool) -> None:
    directory, history = legacy_compacted_dir(tmp_path)
    clock = ManualClock(START_MS + 60_000)
    log = Log.open(directory, COMPACT, clock, had_clean_shutdown=False)
    try:
        upper = log.segments[-1].base_offset
        offset_map = SkimpyOffsetMap(24 * 1024, native=native)
        stats = Cleaner(offset_map=offset_map).clean(CleanRequest(log, 0, upper))
        assert stats.end_offset == upper
        got = [(r.offset, r.key, r.value) for r in log.records()]
        assert got == expected_after_clean(history, upper, lambda _: True)
        assert stats.invalid_messages == 1
        # Every kept entry stayed in its format and codec, and kafka-python reads the cleaned
        # legacy bytes as storagecore does.
        (cleaned, _active) = log.segments
        data = cleaned.log.read(0, cleaned.size_bytes)
        formats = [(b.magic, b.compression) for _, b in cleaned.log.batches()]
        assert set(formats) <= {(0, Compression.GZIP), (0, Compression.NONE), (1, Compression.LZ4),
                                (1, Compression.SNAPPY)}  # fmt: skip
        assert [(m.offset, m.key, m.value) for m in kp_read(data)] == got[:-2]
    finally:
        log.close()
    assert verify_log_dir(tmp_path).ok


def test_legacy_tombstones_go_by_segment_mtime(tmp_path: Path) -> None:
    """Kafka's legacy delete horizon: a v0/v1 tombstone is dropped once its segment is older
    than the last clean segment's mtime minus delete.retention.ms (not by a batch horizon)."""
    directory, history = legacy_compacted_dir(tmp_path)
    clock = ManualClock(START_MS + 60_000)
    log = Log.open(directory, COMPACT, clock, had_clean_shutdown=False)
    try:
        upper = log.segments[-1].base_offset
        for segment, age_s in zip(log.segments[:-1], (100, 50, 0), strict=True):
            when = START_MS / 1000 + 60 - age_s
            os.utime(segment.log.path, (when, when))
        # First dirty offset inside the last legacy segment: the two before it are "clean",
        # the horizon is the second's mtime - 1 s; the first segment is older than that.
        first_dirty = log.segments[2].base_offset
        Cleaner(offset_map=SkimpyOffsetMap(24 * 1024)).clean(CleanRequest(log, first_dirty, upper))
        got = [(r.offset, r.key, r.value) for r in log.records()]
        # Segment 0 (offsets 0-7) is older than the horizon, segments 1 and 2 are not.
        assert got == expected_after_clean(history, upper, lambda o: o >= 8, first_dirty)
        # ... and that differs from keeping every tombstone: some were dropped by mtime.
        assert got != expected_after_clean(history, upper, lambda _: True, first_dirty)
    finally:
        log.close()


def test_copy_of_an_old_dir_survives_a_second_round(tmp_path: Path) -> None:
    directory, _history = legacy_compacted_dir(tmp_path)
    clock = ManualClock(START_MS + 60_000)
    log = Log.open(directory, COMPACT, clock, had_clean_shutdown=False)
    try:
        upper = log.segments[-1].base_offset
        cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 1024))
        cleaner.clean(CleanRequest(log, 0, upper))
        first = [(r.offset, r.key, r.value) for r in log.records()]
        cleaner.clean(CleanRequest(log, 0, upper))
        assert [(r.offset, r.key, r.value) for r in log.records()] == first
    finally:
        log.close()


# -- the columnar read (the Spark data source's decoder) --------------------------------------
@pytest.mark.parametrize("reference", [False, True], ids=["public", "reference"])
def test_columnar_decode_reads_legacy_entries(tmp_path: Path, reference: bool) -> None:
    """v0 rows carry timestamp -1 and timestamp type -1 (Spark's Kafka source shows a missing
    timestamp so); the offset range cuts inside a wrapper; v2 batches after them decode too."""
    directory, model = mixed_dir(tmp_path)
    region = (directory / "00000000000000000000.log").read_bytes()
    decode = _columns_py.decode_columns if reference else None
    args = (region, 0, len(region), COLUMN_NAMES, 5, 33, False, 1 << 20, columns._decompress)
    decoded = DecodedColumns(*decode(*args)) if decode else columns.decode_columns(
        region, columns=COLUMN_NAMES, min_offset=5, max_offset=33
    )  # fmt: skip
    assert decoded.problem is None and decoded.position == len(region)
    wanted = [m for m in model if 5 <= m.offset < 33]
    assert decoded.rows == len(wanted)
    offsets = struct.unpack(f"<{decoded.rows}q", decoded.buffers["offset"][0])
    stamps = struct.unpack(f"<{decoded.rows}q", decoded.buffers["timestamp"][0])
    types = struct.unpack(f"<{decoded.rows}i", decoded.buffers["timestamp_type"][0])
    assert list(offsets) == [m.offset for m in wanted]
    assert list(stamps) == [m.timestamp for m in wanted]
    assert types == tuple(
        -1 if m.offset < 14 else (1 if 27 <= m.offset < 30 else 0) for m in wanted
    )
    _, value_offsets, value_data = decoded.buffers["value"]
    ends = struct.unpack(f"<{decoded.rows + 1}i", value_offsets)
    assert [bytes(value_data[a:b]) for a, b in itertools.pairwise(ends)] == [
        m.value or b"" for m in wanted
    ]


@pytest.mark.skipif(not SkimpyOffsetMap(1024).native, reason="native cleaner engine not built")
def test_native_legacy_passes_match_the_reference() -> None:
    """The C map and filter passes over legacy entries (cleaner/_cleaner_legacy.h) leave the
    same map and take the same decisions as the reference, entry by entry."""
    secret = bytes(range(16))
    native, reference = (SkimpyOffsetMap(24 * 256, native=n, secret=secret) for n in (True, False))
    parts, _ = legacy_history()
    parts.append(kp_entry(1, 1, msgs(9, START_MS, keys=4, tombstone_every=3, keyless_every=4), 31))
    stats = [CleanerStats(), CleanerStats()]
    for offset_map in (native, reference):
        offset_map.clear(max_keys=64)
    batches = [LegacyRecordBatch(entry) for part in parts for entry in entries(part)]
    for batch in batches:
        assert not map_legacy_keys(batch, native, 5, stats[0])
        assert not map_legacy_keys(batch, reference, 5, stats[1])
    assert native.size == reference.size > 0
    assert native.latest_offset == reference.latest_offset == 39
    assert bytes(native._table) == bytes(reference._table)
    assert stats[0].map_messages_read == stats[1].map_messages_read == 39
    for retain in (True, False):
        for batch in batches:
            decided = native.filter_legacy_records(*_message_set(batch), retain)
            assert decided is not None
            flags, invalid = decided
            counted = CleanerStats()
            expected = [
                retain_legacy_record(r, reference, retain, counted) for r in batch.records()
            ]
            assert [bool(f) for f in flags] == expected and invalid == counted.invalid_messages
    # A damaged set is refused natively without a change; the reference raises.
    damaged = bytearray(parts[0])  # three plain v0 messages, the last one's CRC broken
    damaged[-1] ^= 1
    before = bytes(native._table)
    assert native.put_legacy_keys(bytes(damaged), -1, 0, 0) is None
    assert native.filter_legacy_records(bytes(damaged), -1, 0, True) is None
    assert bytes(native._table) == before
