"""Whole cleaning rounds, native and pure-Python reference, against each other.

The same logs (all codecs, null keys, tombstones, headers, producer batches, LogAppendTime)
are cleaned both ways, round after round with small maps (rounds that stop mid-batch) and
small regions, and every file, every counter and the map's probe counts must be identical.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
import unittest.mock
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from storagecore import Compression, Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner import Cleaner, CleanRequest, regions
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from tests.unit.storagecore.helpers.native_cleaner import (
    SECRET,
    START_MS,
    _counters,
    _files,
    needs_native,
)

DELETE_RETENTION_MS = 5_000


# -- whole cleaning rounds, both ways ---------------------------------------------------------

KEYS = [None, b"a", b"b", b"c", b"d", b"e", b"key-" + b"x" * 60, b"key-" + b"y" * 70]


@dataclasses.dataclass(frozen=True)
class Append:
    keys: list[bytes | None]
    tombstones: list[bool]
    codec: Compression
    header: tuple[tuple[str, bytes | None], ...]
    producer: bool
    advance_ms: int


appends = st.builds(
    Append,
    keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=12),
    tombstones=st.lists(st.booleans(), min_size=12, max_size=12),
    codec=st.sampled_from(list(Compression)),
    header=st.sampled_from([(), (("h", b"v"),), (("n", None),), (("ü", b"x"),)]),
    producer=st.booleans(),
    advance_ms=st.integers(min_value=0, max_value=3_000),
)


def _append_all(log: Log, clock: ManualClock, plan: list[Append]) -> None:
    sequence = 0
    for step in plan:
        clock.advance(step.advance_ms)
        now = clock.milliseconds()
        records = [
            NewRecord(
                key=key,
                value=None if tombstone and key is not None else b"value-%d" % index,
                timestamp=now - index,
                headers=step.header,
            )
            for index, (key, tombstone) in enumerate(zip(step.keys, step.tombstones, strict=False))
        ]
        producer = (
            {"producer_id": 42, "producer_epoch": 0, "base_sequence": sequence}
            if step.producer
            else {}
        )
        log.append(build_batch(records, compression=step.codec, **producer))  # type: ignore[arg-type]
        if step.producer:  # the producer's sequences follow on (the log checks them)
            sequence += len(records)


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    plan=st.lists(appends, min_size=1, max_size=14),
    # 4096 slots: room after the probed prefix, so the filter reads the map pass's notes of
    # key positions (SkimpyOffsetMap.clear) instead of digesting keys again.
    map_slots=st.one_of(st.integers(min_value=3, max_value=40), st.just(4096)),
    log_append_time=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**16),
    region_bytes=st.sampled_from([64, 300, 1000, regions.REGION_BYTES]),
)
def test_cleaning_rounds_write_the_same_bytes(
    plan: list[Append], map_slots: int, log_append_time: bool, seed: int, region_bytes: int
) -> None:
    """Native and reference rounds leave the same files, indexes included, and counters;
    small regions make the engine's output chunks continue across region calls and around
    the batches it leaves to the per-batch path."""
    with unittest.mock.patch.object(regions, "REGION_BYTES", region_bytes):
        _clean_both_ways(plan, map_slots, log_append_time, seed)


def _clean_both_ways(plan: list[Append], map_slots: int, log_append_time: bool, seed: int) -> None:
    config = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=random.Random(seed).choice([2048, 4096, 1 << 20]),
        index_interval_bytes=200,
        delete_retention_ms=DELETE_RETENTION_MS,
        message_timestamp_type=("LogAppendTime" if log_append_time else "CreateTime"),
    )
    root = Path(tempfile.mkdtemp())
    logs: list[tuple[Log, ManualClock, Cleaner]] = []
    try:
        for name, native in (("native", True), ("python", False)):
            clock = ManualClock(START_MS)
            # Null keys reach a compacted log only if it was not compacted when they were
            # written (a compacted topic rejects them): append under delete, then switch.
            log = Log.open(
                root / name / "t-0", dataclasses.replace(config, cleanup_policy=("delete",)), clock
            )
            _append_all(log, clock, plan)
            log.roll()
            log.update_config(config)
            # One secret for both: the probe counts compared below depend on the digests.
            offset_map = SkimpyOffsetMap(24 * map_slots, native=native, secret=SECRET)
            cleaner = Cleaner(offset_map=offset_map)
            logs.append((log, clock, cleaner))
        # Rounds until clean, then again once every horizon has passed (tombstones go).
        for later_ms in (0, DELETE_RETENTION_MS + 1):
            for _, clock, _ in logs:
                clock.advance(later_ms)
            first_dirty = [0, 0]
            for _ in range(200):
                results = []
                for index, (log, _, cleaner) in enumerate(logs):
                    end = log.active_segment.base_offset
                    stats = cleaner.clean(CleanRequest(log, first_dirty[index], end))
                    first_dirty[index] = stats.end_offset
                    results.append((_counters(stats), _files(log.directory)))
                assert results[0] == results[1]
                native_map, python_map = logs[0][2].offset_map, logs[1][2].offset_map
                assert (native_map.lookups, native_map.probes) == (
                    python_map.lookups,
                    python_map.probes,
                )
                if first_dirty[0] >= logs[0][0].active_segment.base_offset:
                    break
    finally:
        for log, _, _ in logs:
            log.close()
        shutil.rmtree(root, ignore_errors=True)
