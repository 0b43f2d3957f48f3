"""Building the offset map of a round and partial rounds (Kafka LogCleanerTest, kafka-log-layer.md
§10 items 25, 34, 35): what the map holds, how much of the budget a round probes, a map that
stops at the load factor, and rounds that always make progress."""

from __future__ import annotations

from pathlib import Path

from storagecore import LogConfig, ManualClock
from storagecore.cleaner import Cleaner, CleanerStats
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from tests.unit.storagecore.helpers.cleaning import contents, open_log, put_many, run_round


# -- 25, 34, 35: the offset map, partial rounds ---------------------------------------------------
def test_build_offset_map(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 5), b"v") for i in range(40)])
    log.roll()
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 100))
    stats = CleanerStats()
    full = cleaner.build_offset_map(log, 10, 40, [], stats)
    assert not full
    assert cleaner.offset_map.latest_offset == 39
    assert {cleaner.offset_map.get(b"k%d" % i) for i in range(5)} == set(range(35, 40))
    assert stats.map_messages_read == 30


def test_build_offset_map_probes_only_what_the_round_can_fill(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The map of a round is sized by the offsets it can walk (log end - start), not by the
    whole budget, and still maps every key without filling."""
    log = open_log(tmp_path, clock, LogConfig(cleanup_policy=("compact",)))
    put_many(log, [(b"k%d" % i, b"v") for i in range(2000)])
    log.roll()
    offset_map = SkimpyOffsetMap(24 * 100_000)
    cleaner = Cleaner(offset_map=offset_map)
    stats = CleanerStats()
    assert not cleaner.build_offset_map(log, 0, 2000, [], stats)
    assert offset_map.capacity > 2000 and offset_map.slots < offset_map.budget_slots
    assert offset_map.size == 2000 and offset_map.latest_offset == 1999
    assert all(offset_map.get(b"k%d" % i) == i for i in range(2000))
    log.close()


def test_build_partial_offset_map_stops_at_the_load_factor(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % i, b"v") for i in range(50)])
    log.roll()
    offset_map = SkimpyOffsetMap(24 * 10, load_factor=0.5)  # 10 slots, 5 keys
    cleaner = Cleaner(offset_map=offset_map)
    assert cleaner.build_offset_map(log, 0, 50, [], CleanerStats())
    assert offset_map.size == 5 and offset_map.latest_offset == 4
    assert offset_map.get(b"k5") == -1


def test_partial_segment_clean_always_makes_progress(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, LogConfig(cleanup_policy=("compact",), segment_bytes=100_000))
    pairs = [(b"k%d" % (i % 3), b"v%d" % i) for i in range(12)]
    put_many(log, pairs)
    log.roll()
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 2, load_factor=0.5))  # one key per round
    first_dirty = 0
    rounds = 0
    while first_dirty < 12:
        stats = run_round(log, cleaner, first_dirty=first_dirty)
        assert stats.end_offset > first_dirty, "every round makes progress"
        first_dirty = stats.end_offset
        rounds += 1
    assert rounds >= 3
    assert sorted(o for o, _, _ in contents(log)) == [9, 10, 11]
