"""DESIGN invariant 4: memory for compaction is bounded by the dedupe buffer, whatever the
number of keys. Far more distinct keys than the map holds: the compaction completes in many
rounds, with the right result, and the peak of traced allocations stays within the buffer plus
a stated overhead."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from storagecore import LogConfig, LogManager, ManualClock, NewRecord, TopicPartition, build_batch
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.config import CleanerConfig

pytestmark = pytest.mark.integration

MAP_BYTES = 24 * 500  # 500 slots, 450 keys per round
KEYS = 4_000
#: Stated overhead beyond the map: one 1 MiB read chunk held while the next is read, the
#: output buffer of one index interval, and the Python objects of one batch being filtered.
OVERHEAD_BYTES = 4 << 20


def test_many_more_keys_than_the_map_holds(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=256 << 10, file_delete_delay_ms=0)
    tp = TopicPartition("wide", 0)
    with LogManager([tmp_path], default_config=config, clock=clock) as manager:
        log = manager.get_or_create_log(tp)
        for start in range(0, 2 * KEYS, 100):  # every key twice, 100 records per batch
            log.append(
                build_batch(
                    [
                        NewRecord(key=b"key-%06d" % (i % KEYS), value=b"v%d" % i, timestamp=0)
                        for i in range(start, start + 100)
                    ]
                )
            )
        log.roll()
        end = log.active_segment.base_offset
        cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=MAP_BYTES))
        tracemalloc.start()
        try:
            baseline, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            rounds = cleaner.clean_until_done()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(rounds) >= (KEYS // 450), "several rounds"
        assert all(r.keys_in_map <= 450 for r in rounds)
        assert peak - baseline <= MAP_BYTES + OVERHEAD_BYTES, (peak - baseline, MAP_BYTES)
        survivors = list(log.records())
        assert (
            [r.offset for r in survivors]
            == list(range(KEYS, 2 * KEYS))
            == list(range(end - KEYS, end))
        )
